// The one way tandem runs a simulation in a fresh process. SimGrid allows one platform per process,
// and SimGrid (its ns-3 glue above all) aborts the whole process on some failed internal
// assertions; so every simulation that is not the process's only one (a sweep over clusters, the
// start-up's bootstrap ring, the jobs of `tandem plan`) runs in a forked child, which sends its
// reply back to the parent as JSON.
//
// A reply is any type nlohmann-json converts both ways: a type of tandem's gets to_json/from_json
// found by ADL, next to the type (declared with <nlohmann/json_fwd.hpp> where the type is in a
// header). This header includes <nlohmann/json.hpp>: include it from .cc files only.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tandem::sim {

// Runs work() in a child process and returns its reply. A tandem::Error the child throws is
// rethrown here as it was (its code and message); a child that dies (SimGrid aborts on failed
// internal assertions) is Error(kBackend) with the reason from its stderr, and so is a reply that
// does not read back as the type. The child's stderr is passed on when it ends normally. `work`
// runs only in the child: what it changes stays there.
template <typename Work>
auto run_isolated(Work&& work) -> std::invoke_result_t<Work&>;

// What one piece of work of run_isolated_parallel came to: its reply, or why not.
template <typename Reply>
struct Isolated {
  std::optional<Reply> reply;
  std::string error;  // without a reply: the Error the piece threw, or how its process died
  ErrorCode code = ErrorCode::kBackend;
};

// The outcome of a piece of run_isolated_parallel's work: Isolated<what work(index) returns>.
template <typename Work>
using IsolatedOf = Isolated<std::invoke_result_t<Work&, size_t>>;

// Runs work(0) .. work(count - 1), each in its own child process, at most `jobs` at a time
// (Error(kInvalidArgument) when jobs < 1), and calls done(index, outcome) in this process as each
// one ends (in the order they end). A piece that throws or dies is reported to `done`, not thrown;
// the others go on.
template <typename Work>
void run_isolated_parallel(size_t count, Work&& work, int jobs,
                           const std::function<void(size_t, const IsolatedOf<Work>&)>& done);

// ---- the transport underneath ------------------------------------------------------------------

namespace detail {

// The child's work returns text (its reply as JSON), which comes back to the parent as it is.
std::string run_isolated_text(const std::function<std::string()>& work);

struct IsolatedText {
  bool ok = false;
  std::string text;  // the work's text
  std::string error;
  ErrorCode code = ErrorCode::kBackend;
};
void run_isolated_parallel_text(size_t count, const std::function<std::string(size_t)>& work, int jobs,
                                const std::function<void(size_t, const IsolatedText&)>& done);

// The reply a child's text stands for; Error(kBackend) when it does not read as a Reply.
template <typename Reply>
Reply read_reply(const std::string& text) {
  try {
    return nlohmann::json::parse(text).get<Reply>();
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorCode::kBackend, "the simulation process's reply does not read back: {}", e.what());
  }
}

}  // namespace detail

template <typename Work>
auto run_isolated(Work&& work) -> std::invoke_result_t<Work&> {
  using Reply = std::invoke_result_t<Work&>;
  const std::string text = detail::run_isolated_text([&work] { return nlohmann::json(work()).dump(); });
  return detail::read_reply<Reply>(text);
}

template <typename Work>
void run_isolated_parallel(size_t count, Work&& work, int jobs,
                           const std::function<void(size_t, const IsolatedOf<Work>&)>& done) {
  using Reply = std::invoke_result_t<Work&, size_t>;
  detail::run_isolated_parallel_text(
      count, [&work](size_t index) { return nlohmann::json(work(index)).dump(); }, jobs,
      [&done](size_t index, const detail::IsolatedText& result) {
        Isolated<Reply> outcome;
        outcome.error = result.error;
        outcome.code = result.code;
        if (result.ok) {
          try {
            outcome.reply = detail::read_reply<Reply>(result.text);
          } catch (const Error& e) {
            outcome.error = e.what();
            outcome.code = e.code();
          }
        }
        done(index, outcome);
      });
}

}  // namespace tandem::sim
