// A temporary folder for a test, removed with everything in it when the object goes:
//   TempDir dir;  std::string p = dir.Write("config", "text");  dir.path() + "/x"
#pragma once

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace tessera::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tessera-test-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // Writes `text` to the file `name` in the folder; returns its path.
  std::string Write(const std::string& name, const std::string& text) const {
    const std::string p = path_ + "/" + name;
    std::ofstream(p) << text;
    return p;
  }
  // A shell script `name` (made executable) running `body`; returns its path.
  std::string Script(const std::string& name, const std::string& body) const {
    const std::string p = Write(name, "#!/bin/sh\n" + body);
    ::chmod(p.c_str(), 0755);
    return p;
  }

 private:
  std::string path_;
};

}  // namespace tessera::testing
