// endor_packer: output files written atomically (temp + fsync + rename), the temp file reported
// to the caller so a signal handler can remove it.
#pragma once

#include <functional>
#include <string>

namespace endor {

// Temporary files: on_temp_file(path, true) comes BEFORE `path` may be created, and
// on_temp_file(path, false) once it is gone (renamed, removed or unlinked). Several can be
// registered at once. The CLI keeps them for its signal handler, which unlinks them.
using TempFileCallback = std::function<void(const std::string& path, bool exists)>;

// Writes `content` to "<path>.tmp-<pid>", fsyncs and renames it to `path`; removes the temp on
// error. on_temp_file as in PackCallbacks.
void write_file_atomic(const std::string& path, const std::string& content,
                       const TempFileCallback& on_temp_file = {});

}  // namespace endor
