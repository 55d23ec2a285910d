// File: tools/tool_flags.cc
// CLI11 set up the same way for every tool: layout, errors, shared flags.
#include "tool_flags.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bfc/units.h"
#include "tool_io.h"

namespace bfc::tools {
namespace {

constexpr size_t kHelpWidth = 96;
constexpr size_t kNameColumn = 38;

// CLI11's default layout lists positionals apart from their group and does
// not wrap; this one keeps sections as the tool declares them.
class GroupedFormatter : public CLI::Formatter {
 public:
  GroupedFormatter() { column_width(kNameColumn); }

  std::string make_help(const CLI::App* app, std::string name,
                        CLI::AppFormatMode mode) const override {
    std::string out = make_usage(app, name);
    if (!app->get_description().empty()) {
      absl::StrAppend(&out, "\n", Wrap(app->get_description(), kHelpWidth),
                      "\n");
    }
    // The house order first, then any other group in declaration order.
    std::vector<std::string> groups = {kGroupInputs, kGroupAllocator,
                                       kGroupPlanner, kGroupOutputs,
                                       kGroupReporting};
    for (const std::string& g : app->get_groups()) {
      if (std::find(groups.begin(), groups.end(), g) == groups.end()) {
        groups.push_back(g);
      }
    }
    for (const std::string& group : groups) {
      if (group.empty()) continue;
      std::vector<const CLI::Option*> opts = app->get_options(
          [&](const CLI::Option* o) { return o->get_group() == group; });
      if (opts.empty()) continue;
      absl::StrAppend(&out, "\n", group, ":\n");
      for (const CLI::Option* o : opts) {
        absl::StrAppend(&out, make_option(o, o->get_positional()));
      }
    }
    if (!app->get_footer().empty()) {
      absl::StrAppend(&out, "\n", Wrap(app->get_footer(), kHelpWidth), "\n");
    }
    return out;
  }

  // The value's shape only: "--memory-limit SIZE", "--plan[=true|false]",
  // "TRACE ..." (CLI11's Needs/Excludes/Env notes are left to descriptions).
  std::string make_option_opts(const CLI::Option* o) const override {
    const std::string& text = o->get_option_text();
    if (!text.empty()) return text[0] == '[' ? text : " " + text;
    std::string out;
    if (o->get_type_size() != 0 && !o->get_type_name().empty()) {
      out = " " + o->get_type_name();
    }
    if (o->get_expected_max() == CLI::detail::expected_max_vector_size) {
      out += " ...";
    }
    return out;
  }

  std::string make_option_desc(const CLI::Option* o) const override {
    return Wrap(CLI::Formatter::make_option_desc(o), kHelpWidth - kNameColumn);
  }
};

}  // namespace

std::string Wrap(absl::string_view text, size_t width) {
  std::string out;
  bool first_paragraph = true;
  for (absl::string_view paragraph : absl::StrSplit(text, '\n')) {
    if (!first_paragraph) out += '\n';
    first_paragraph = false;
    size_t line = 0;
    for (absl::string_view word :
         absl::StrSplit(paragraph, ' ', absl::SkipEmpty())) {
      if (line > 0 && line + 1 + word.size() > width) {
        out += '\n';
        line = 0;
      } else if (line > 0) {
        out += ' ';
        ++line;
      }
      absl::StrAppend(&out, word);
      line += word.size();
    }
  }
  return out;
}

void ConfigureApp(CLI::App& app, const std::string& footer) {
  app.formatter(std::make_shared<GroupedFormatter>());
  app.set_help_flag("-h,--help", "Print this help and exit")
      ->group(kGroupReporting);
  app.footer(footer);
}

void PrintError(const CLI::App& app, absl::string_view message) {
  // Whole, even past a NUL byte from a binary input ("%.*s" stops there).
  std::string line = absl::StrCat(app.get_name(), ": ", message, "\n");
  std::fwrite(line.data(), 1, line.size(), stderr);
}

std::optional<int> ParseCommandLine(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return kExitOk;
  } catch (const CLI::CallForAllHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    PrintError(app, e.what());
    std::fprintf(stderr, "Run '%s --help' for the flags.\n",
                 app.get_name().c_str());
    return kExitUsage;
  }
  return std::nullopt;
}

CLI::Option* AddOutputFlag(CLI::App& app, const std::string& names,
                           std::string* path, const std::string& description,
                           bool stdout_ok) {
  return app.add_option(names, *path, description)
      ->type_name("PATH")
      ->check(CLI::Validator(
          [stdout_ok](std::string& value) {
            return CheckOutputPath(value, stdout_ok);
          },
          ""))
      ->group(kGroupOutputs);
}

CLI::Option* AddSummaryJsonFlag(CLI::App& app, std::string* path,
                                absl::string_view keys) {
  return AddOutputFlag(
      app, "--summary-json", path,
      absl::StrCat("Write the run's numbers as one JSON object ('-': "
                   "standard output, and the text report goes to standard "
                   "error). Keys: ",
                   keys),
      /*stdout_ok=*/true);
}

CLI::Option* AddSkipUnknownFreesFlag(CLI::App& app, bool* skip) {
  return app
      .add_flag("--skip-unknown-frees", *skip,
                "Skip frees of pointers that are not live (counted) instead "
                "of failing on them. Default: false")
      ->option_text("[=true|false]")
      ->group(kGroupInputs);
}

void AddVerbosityFlags(CLI::App& app, Verbosity* verbosity) {
  app.add_flag("--quiet", verbosity->quiet,
               "Print only errors (the exit status tells the rest); not with "
               "--verbose")
      ->group(kGroupReporting);
  app.add_flag("--verbose", verbosity->verbose,
               "Also print the configuration and where each setting "
               "came from (to standard error)")
      ->group(kGroupReporting);
  // On the values, once parsed: CLI11's excludes() refused the two flags
  // named together even when one was off (--quiet=false --verbose). The app's
  // final callback runs inside parse(), so its error is a usage error.
  app.callback([verbosity] {
    if (verbosity->quiet && verbosity->verbose) {
      throw CLI::ValidationError("--quiet",
                                 "cannot be combined with --verbose");
    }
  });
}

CLI::Validator ByteSizeValidator(bool positive, uint64_t max) {
  return CLI::Validator(
      [positive, max](std::string& value) -> std::string {
        absl::StatusOr<uint64_t> bytes = ParseByteSize(value);
        if (!bytes.ok()) return std::string(bytes.status().message());
        if (positive && *bytes == 0) {
          return absl::StrCat("\"", value, "\" is 0 bytes; give a size > 0");
        }
        if (*bytes > max) {
          return absl::StrCat("\"", value, "\" is ", *bytes,
                              " bytes; the most accepted is ", max, " (",
                              HumanReadableBytesExact(max), ")");
        }
        return "";
      },
      "");
}

uint64_t ByteSizeValue(const std::string& text) {
  return ParseByteSize(text).value_or(0);
}

}  // namespace bfc::tools
