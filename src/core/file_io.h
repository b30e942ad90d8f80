// Whole files in and out, with errors that name the path. A written file is complete
// or absent: the bytes go to a temporary file beside it, which is renamed over it only
// once every byte is written and flushed to the disk.
#pragma once

#include <string>
#include <string_view>

namespace lowbit {

// Writes `bytes` to `path`, replacing a regular file there atomically (temp file in the
// same directory, fsync, rename; an existing file must be writable, and keeps its
// permissions; a symbolic link's target is replaced, not the link). A path that
// is not a regular file (a device such as /dev/full or /dev/stdout, a pipe) is written
// in place, every write checked. Throws lowbit::Error naming the path and the cause:
// a directory, a missing parent directory, no permission, a failed write (disk full).
void write_file_atomically(const std::string& path, std::string_view bytes);

// The whole content of `path`. Throws lowbit::Error naming the path when it is absent,
// a directory, unreadable, or a read fails.
std::string read_file(const std::string& path);

}  // namespace lowbit
