#include "sim/isolated.h"

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "core/child_processes.h"

namespace tandem::sim {

using nlohmann::json;

namespace {

// The line of a dead child's stderr that says why: SimGrid's CRITICAL assertion, or the last line.
std::string death_reason(const std::string& stderr_text) {
  std::string last;
  size_t begin = 0;
  while (begin < stderr_text.size()) {
    size_t end = stderr_text.find('\n', begin);
    if (end == std::string::npos) end = stderr_text.size();
    const std::string line = stderr_text.substr(begin, end - begin);
    if (line.find("CRITICAL") != std::string::npos) return line;
    if (!line.empty() && line.find("->") == std::string::npos && line.find("Backtrace") == std::string::npos) {
      last = line;
    }
    begin = end + 1;
  }
  return last;
}

// A child process running one piece of work: its pid, the pipe it answers on, and the temporary
// file its stderr goes to (passed on when it exits normally, mined for the reason when it dies:
// SimGrid aborts on failed internal assertions).
struct Child {
  pid_t pid = -1;
  int answer_fd = -1;
  std::FILE* err_file = nullptr;
  std::string answer;
};

Child spawn_child(const std::function<std::string()>& work) {
  int fds[2];
  if (pipe(fds) != 0) fail(ErrorCode::kBackend, "simulation: pipe failed: {}", std::strerror(errno));
  std::FILE* err_file = std::tmpfile();
  if (err_file == nullptr) fail(ErrorCode::kBackend, "simulation: tmpfile failed: {}", std::strerror(errno));
  std::fflush(nullptr);  // the child must not write the parent's buffered output again
  // A child that dies with this process, whatever ends it (core/child_processes.h).
  const pid_t child = fork_child();
  if (child < 0) fail(ErrorCode::kBackend, "simulation: fork failed: {}", std::strerror(errno));
  if (child == 0) {
    close(fds[0]);
    dup2(fileno(err_file), STDERR_FILENO);
    json reply;
    try {
      reply = {{"result", work()}};
    } catch (const Error& e) {
      reply = {{"error", e.what()}, {"code", static_cast<int>(e.code())}};  // the parent rethrows it as is
    } catch (const std::exception& e) {
      reply = {{"error", e.what()}, {"code", static_cast<int>(ErrorCode::kBackend)}};
    }
    const std::string text = reply.dump();
    size_t written = 0;
    while (written < text.size()) {
      const ssize_t w = write(fds[1], text.data() + written, text.size() - written);
      if (w <= 0) break;
      written += static_cast<size_t>(w);
    }
    close(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  return {child, fds[0], err_file, {}};
}

// Reads what is there (blocking); false at the end of the answer.
bool read_answer(Child& child) {
  char buffer[1 << 16];
  const ssize_t got = read(child.answer_fd, buffer, sizeof buffer);
  if (got > 0) {
    child.answer.append(buffer, static_cast<size_t>(got));
    return true;
  }
  if (got < 0 && errno == EINTR) return true;
  return false;
}

// Reaps the child once its answer has ended: its result, or the error it threw (or died of).
std::string finish_child(Child& child) {
  close(child.answer_fd);
  int status = 0;
  forget_child(child.pid);
  waitpid(child.pid, &status, 0);
  std::string err_text;
  char buffer[1 << 16];
  std::rewind(child.err_file);
  for (size_t got; (got = std::fread(buffer, 1, sizeof buffer, child.err_file)) > 0;) err_text.append(buffer, got);
  std::fclose(child.err_file);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || child.answer.empty()) {
    const std::string reason = death_reason(err_text);
    fail(ErrorCode::kBackend, "the simulation process died ({}){}{}",
         WIFSIGNALED(status) ? fmt::format("signal {}", WTERMSIG(status)) : fmt::format("status {}", status),
         reason.empty() ? "" : ": ", reason);
  }
  std::fputs(err_text.c_str(), stderr);
  const json reply = json::parse(child.answer);
  if (reply.contains("error")) {
    throw Error(static_cast<ErrorCode>(reply.at("code").get<int>()), reply.at("error").get<std::string>());
  }
  return reply.at("result").get<std::string>();
}

}  // namespace

namespace detail {

std::string run_isolated_text(const std::function<std::string()>& work) {
  Child child = spawn_child(work);
  while (read_answer(child)) {
  }
  return finish_child(child);
}

void run_isolated_parallel_text(size_t count, const std::function<std::string(size_t)>& work, int jobs,
                                const std::function<void(size_t, const IsolatedText&)>& done) {
  if (jobs < 1) fail(ErrorCode::kInvalidArgument, "run_isolated_parallel: jobs must be at least 1 (got {})", jobs);
  std::vector<std::pair<size_t, Child>> running;
  size_t next = 0;
  while (next < count || !running.empty()) {
    while (next < count && running.size() < static_cast<size_t>(jobs)) {
      const size_t index = next++;
      running.emplace_back(index, spawn_child([&work, index] { return work(index); }));
    }
    std::vector<pollfd> fds;
    for (const auto& [index, child] : running) fds.push_back({child.answer_fd, POLLIN, 0});
    if (poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) {
      fail(ErrorCode::kBackend, "simulation: poll failed: {}", std::strerror(errno));
    }
    for (size_t i = fds.size(); i-- > 0;) {
      if (fds[i].revents == 0) continue;
      auto& [index, child] = running[i];
      if (read_answer(child)) continue;
      IsolatedText result;
      try {
        result.text = finish_child(child);
        result.ok = true;
      } catch (const Error& e) {
        result.error = e.what();
        result.code = e.code();
      }
      const size_t finished = index;
      running.erase(running.begin() + static_cast<ptrdiff_t>(i));
      done(finished, result);
    }
  }
}

}  // namespace detail

}  // namespace tandem::sim
