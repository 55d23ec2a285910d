// File: tools/tool_flags.h
// -----------------------------------------------------------------------------
//
// The command line of bfc-replay and bfc-plan: one flags library, one help
// layout, the flags both tools share declared once (so they are spelled the
// same), and the exit codes.
//
// The flags library is CLI11 (Debian: libcli11-dev). Why CLI11:
//   * header-only: nothing to link or ship with the tools;
//   * no global flag registry: each tool builds its own CLI::App, and a bad
//     flag is an exception we turn into our own exit code 2 (Abseil's flags
//     are process-global and exit(1) on a bad flag, which would collide with
//     "1 = bad input");
//   * --help is generated from the declarations, so it cannot drift;
//   * typed options with validators: a bad value is refused while parsing,
//     with a message that names the flag.
//
// Usage (a tool's Main):
//
//   CLI::App app("what the tool does", "bfc-tool");
//   bfc::tools::ConfigureApp(app);
//   app.add_option("--thing", thing, "...")->group(bfc::tools::kGroupInputs);
//   if (std::optional<int> exit = bfc::tools::ParseCommandLine(app, argc,
//   argv))
//     return *exit;   // 0 after --help, 2 after a usage error
//
// Thread safety: single-threaded programs.
#ifndef BFC_TOOLS_TOOL_FLAGS_H_
#define BFC_TOOLS_TOOL_FLAGS_H_

#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/string_view.h"

namespace bfc::tools {

// Exit status of every tool (API.md).
enum ExitCode : int {
  kExitOk = 0,
  kExitBadInput = 1,  // unreadable or malformed trace; an output not written
  kExitUsage = 2,     // bad flags or values; an unavailable backend
  kExitFailedAllocations = 3,  // bfc-replay ran, but allocations failed
};

// Help sections, in this order when a tool uses them all.
inline constexpr char kGroupInputs[] = "Inputs";
inline constexpr char kGroupAllocator[] = "Allocator";
inline constexpr char kGroupPlanner[] = "Planner";
inline constexpr char kGroupOutputs[] = "Outputs";
inline constexpr char kGroupReporting[] = "Reporting";

// `text` re-flowed to lines of at most `width` columns (a longer word stays
// whole); "\n" in `text` starts a new line.
std::string Wrap(absl::string_view text, size_t width);

// The house layout: sections by group with positionals inside their group,
// descriptions wrapped, -h/--help in Reporting, `footer` (wrapped) at the end.
void ConfigureApp(CLI::App& app, const std::string& footer);

// Parses the command line. nullopt: go on. Otherwise the exit status to
// return: 0 after --help (printed to stdout), 2 after a usage error (one line
// to stderr naming the flag, then a pointer to --help).
std::optional<int> ParseCommandLine(CLI::App& app, int argc, char** argv);

// "<tool>: <message>" on stderr.
void PrintError(const CLI::App& app, absl::string_view message);

// --- flags both tools have ---------------------------------------------------

// An output file flag (group Outputs): the path is only ever this flag's
// value, and is checked while parsing (CheckOutputPath in tool_io.h): an
// existing directory, an existing trace or a missing directory is refused.
// "-" (standard output) only when `stdout_ok`.
CLI::Option* AddOutputFlag(CLI::App& app, const std::string& names,
                           std::string* path, const std::string& description,
                           bool stdout_ok = false);

// --summary-json PATH: the run's numbers as one JSON object; "-" = stdout.
CLI::Option* AddSummaryJsonFlag(CLI::App& app, std::string* path,
                                absl::string_view keys);

// --skip-unknown-frees[=BOOL] (group Inputs).
CLI::Option* AddSkipUnknownFreesFlag(CLI::App& app, bool* skip);

struct Verbosity {
  bool quiet = false;    // only errors
  bool verbose = false;  // also the configuration and where it came from
};
// --quiet / --verbose (group Reporting), mutually exclusive.
void AddVerbosityFlags(CLI::App& app, Verbosity* verbosity);

// Accepts a byte size (bfc/units.h); `positive`: and not 0.
CLI::Validator ByteSizeValidator(bool positive, uint64_t max = UINT64_MAX);
// The value of a flag that ByteSizeValidator accepted.
uint64_t ByteSizeValue(const std::string& text);

}  // namespace bfc::tools

#endif  // BFC_TOOLS_TOOL_FLAGS_H_
