// Command-line flags for one subcommand.
//
// Each subcommand declares its own flags (so `ladder train --help` lists only
// train's flags and an unknown flag is named with its command), binding each
// to a variable whose current value is the default. Accepted forms:
// `--name value`, `--name=value`, and for booleans `--name` / `--name=false`.
// Numbers must parse whole; a Double must be finite (no inf or nan).
// Anything not starting with `--` is a positional argument; a command whose
// FlagSet names no positional usage refuses them.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace ladder {

class FlagSet {
 public:
  // `command` as the user types it ("ladder train"); `summary` one line.
  FlagSet(std::string command, std::string summary, std::string positional_usage = "");

  // `shown_default` replaces the printed default in --help (e.g. "from the
  // config" for a flag that overrides a config key).
  void String(const std::string& name, std::string* target, const std::string& help,
              const char* shown_default = nullptr);
  void Int(const std::string& name, int64_t* target, const std::string& help,
           const char* shown_default = nullptr);
  void Double(const std::string& name, double* target, const std::string& help,
              const char* shown_default = nullptr);
  void Bool(const std::string& name, bool* target, const std::string& help);

  // Parses argv[0..argc) (the arguments after the subcommand). Errors are
  // InvalidArgument with one line naming the flag and the command: an
  // unknown flag, a missing or malformed value, or a positional argument
  // when positional_usage is empty. Counting positional arguments is the
  // command's business.
  absl::Status Parse(int argc, char** argv);

  bool help_requested() const { return help_requested_; }
  bool IsSet(const std::string& name) const { return set_.count(name) > 0; }
  const std::vector<std::string>& positional() const { return positional_; }
  const std::string& command() const { return command_; }
  std::string Help() const;

 private:
  struct Flag {
    std::string name;
    std::string help;
    std::string default_text;
    bool is_bool = false;
    std::function<absl::Status(const std::string&)> set;
  };
  const Flag* Find(const std::string& name) const;

  std::string command_;
  std::string summary_;
  std::string positional_usage_;
  std::vector<Flag> flags_;
  std::set<std::string> set_;
  std::vector<std::string> positional_;
  bool help_requested_ = false;
};

// Runs a subcommand: parses flags, prints --help to stdout (exit 0), or runs
// `body`; a failed status becomes one line "<command>: <message>" on stderr
// and exit code 2 (bad input) or 1 (runtime failure; std::bad_alloc from
// `body` is one, "out of memory: ..."). With `speak` false
// (every rank but 0 of a parallel job) the outcome is the same but silent.
int RunCommand(FlagSet& flags, int argc, char** argv, const std::function<absl::Status()>& body,
               bool speak = true);

}  // namespace ladder
