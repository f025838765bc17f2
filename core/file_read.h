// Reading an input file whole, with a ceiling on its size: the one way tandem reads what a user
// hands it (scenarios, plans, schedules, results.json, flight-recorder dumps). Each kind names its
// ceiling next to its format (kMaxScenarioFileBytes, kMaxFrDumpFileBytes, ...); docs/cli.md
// ("Input files") lists them.
//
// Why: a reader that grows its buffer until end of file never ends on /dev/zero, blocks forever
// on a FIFO, and takes 8 GB for an 8 GB sparse file that holds no data at all. Here the size is
// known before the first byte is read, and only regular files are read.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace tandem {

// Reads the whole of `path` into `bytes` (replacing what it held, reusing its memory) when `path`
// is a regular file, or a symbolic link to one, of at most `max_bytes` bytes. `what` names the
// file's kind in messages ("scenario", "flight-recorder dump"). Every refusal is Error(kIo), one
// line naming the file:
//   scenario 'x.yaml' is a folder, not a file
//   scenario '/dev/zero' is a character device, not a regular file   (also FIFOs, sockets, ...)
//   flight-recorder dump 'D/rank_0' is 8.0 GiB (8589934592 bytes), over the limit of 1 GiB
//   (1073741824 bytes)
//   cannot read scenario 'x.yaml': No such file or directory
// Never blocks on a FIFO and never opens a device: the kind is checked before the file is opened
// and again on the opened file. A file that grows past `max_bytes` while it is read is refused.
void read_file_bounded(const std::filesystem::path& path, uint64_t max_bytes, std::string_view what,
                       std::string& bytes);
std::string read_file_bounded(const std::filesystem::path& path, uint64_t max_bytes, std::string_view what);

// "512 B", "4 MiB", "8.0 GiB": a byte count as messages show it (binary units, one decimal unless
// whole).
std::string byte_size_text(uint64_t bytes);

}  // namespace tandem
