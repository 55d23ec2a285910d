// File: tests/testing/tool_test.h
// A fixture for tests that run one of the tools (bfc-replay, bfc-plan) as a
// user would: a scratch directory per test, files written into it, and the
// binary run through the shell with its exit status, stdout and stderr.
#ifndef BFC_TESTS_TESTING_TOOL_TEST_H_
#define BFC_TESTS_TESTING_TOOL_TEST_H_

#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace bfc::testing {

struct ToolResult {
  bool exited = false;  // false: killed by a signal (a crash)
  int code = -1;
  std::string out;
  std::string err;
};

inline std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

// A small trace: three allocations, one of them 1 MiB, all freed.
inline constexpr char kSmallTrace[] =
    "Thread,Time,Action,Pointer,Size,Stream\n"
    "1,0,allocate,0x100,256,0\n"
    "1,0,allocate,0x200,1048576,0\n"
    "1,0,free,0x100,256,0\n"
    "1,0,allocate,0x300,4096,0\n"
    "1,0,free,0x300,4096,0\n"
    "1,0,free,0x200,1048576,0\n";

class ToolTest : public ::testing::Test {
 protected:
  // `binary`: the tool's path.
  explicit ToolTest(std::string binary) : binary_(std::move(binary)) {}

  void SetUp() override {
    // Runs must not depend on the environment of whoever runs the tests.
    unsetenv("BFC_ALLOC_CONF");
    std::string tmpl = ::testing::TempDir() + "bfc_tool_test.XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    ASSERT_NE(mkdtemp(buf.data()), nullptr);
    dir_ = buf.data();
  }
  void TearDown() override {
    for (const std::string& f : files_) std::remove(f.c_str());
    rmdir(dir_.c_str());
  }

  std::string Write(const std::string& name, const std::string& content) {
    std::string p = File(name);
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }
  std::string File(const std::string& name) {
    files_.push_back(dir_ + "/" + name);
    return files_.back();
  }

  // The names of the files in the test's directory (temporary files left
  // behind would show up here).
  std::vector<std::string> DirEntries() {
    std::vector<std::string> names;
    DIR* d = opendir(dir_.c_str());
    if (d == nullptr) return names;
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != ".." && n != "stdout" && n != "stderr") {
        names.push_back(n);
      }
    }
    closedir(d);
    std::sort(names.begin(), names.end());
    return names;
  }

  // Runs the tool with `args` (already shell-quoted where needed), with
  // `env` ("NAME='value' ...") in its environment.
  ToolResult Run(const std::string& args, const std::string& env = "") {
    std::string out = File("stdout"), err = File("stderr");
    std::string cmd =
        env + " '" + binary_ + "' " + args + " >'" + out + "' 2>'" + err + "'";
    int status = std::system(cmd.c_str());
    ToolResult r;
    r.exited = status != -1 && WIFEXITED(status);
    if (r.exited) r.code = WEXITSTATUS(status);
    r.out = Slurp(out);
    r.err = Slurp(err);
    return r;
  }

  // Runs the tool with `args` and standard output on /dev/full, where every
  // write fails (ENOSPC): its exit status (-1: it did not exit) and stderr.
  int RunIntoFullDevice(const std::string& args, std::string* err) {
    const std::string err_path = File("stderr.full");
    const std::string cmd =
        "'" + binary_ + "' " + args + " >/dev/full 2>'" + err_path + "'";
    const int status = std::system(cmd.c_str());
    *err = Slurp(err_path);
    return status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  std::string binary_;
  std::string dir_;
  std::vector<std::string> files_;
};

}  // namespace bfc::testing

#endif  // BFC_TESTS_TESTING_TOOL_TEST_H_
