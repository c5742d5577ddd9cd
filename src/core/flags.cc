#include "src/core/flags.h"

#include <cmath>
#include <cstdio>
#include <new>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/core/status.h"

namespace ladder {

FlagSet::FlagSet(std::string command, std::string summary, std::string positional_usage)
    : command_(std::move(command)),
      summary_(std::move(summary)),
      positional_usage_(std::move(positional_usage)) {}

void FlagSet::String(const std::string& name, std::string* target, const std::string& help,
                     const char* shown_default) {
  flags_.push_back(
      {name, help, shown_default ? shown_default : *target, false, [target](const std::string& v) {
         *target = v;
         return absl::OkStatus();
       }});
}

void FlagSet::Int(const std::string& name, int64_t* target, const std::string& help,
                  const char* shown_default) {
  flags_.push_back({name, help, shown_default ? shown_default : absl::StrCat(*target), false,
                    [this, name, target](const std::string& v) {
                      if (!absl::SimpleAtoi(v, target)) {
                        return absl::InvalidArgumentError(
                            absl::StrCat("flag --", name, " expects an integer, got '", v, "'"));
                      }
                      return absl::OkStatus();
                    }});
}

void FlagSet::Double(const std::string& name, double* target, const std::string& help,
                     const char* shown_default) {
  flags_.push_back({name, help, shown_default ? shown_default : absl::StrCat(*target), false,
                    [name, target](const std::string& v) {
                      // No flag means infinity or NaN by either: refused
                      // here, rather than by each command's range check.
                      if (!absl::SimpleAtod(v, target) || !std::isfinite(*target)) {
                        return absl::InvalidArgumentError(absl::StrCat(
                            "flag --", name, " expects a finite number, got '", v, "'"));
                      }
                      return absl::OkStatus();
                    }});
}

void FlagSet::Bool(const std::string& name, bool* target, const std::string& help) {
  flags_.push_back(
      {name, help, *target ? "true" : "false", true, [name, target](const std::string& v) {
         if (!absl::SimpleAtob(v, target)) {
           return absl::InvalidArgumentError(
               absl::StrCat("flag --", name, " expects true or false, got '", v, "'"));
         }
         return absl::OkStatus();
       }});
}

const FlagSet::Flag* FlagSet::Find(const std::string& name) const {
  for (const Flag& f : flags_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

absl::Status FlagSet::Parse(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      help_requested_ = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0 || arg == "--") {
      positional_.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2);
    std::string value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    const Flag* flag = Find(name);
    if (flag == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag --", name, " (see '", command_, " --help')"));
    }
    if (!has_value) {
      if (flag->is_bool) {
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        return absl::InvalidArgumentError(absl::StrCat("flag --", name, " needs a value"));
      }
    }
    RETURN_IF_ERROR(flag->set(value));
    set_.insert(name);
  }
  // A command that takes none refuses them, so that a typo such as
  // `-max-tokens 5` is not silently dropped.
  if (positional_usage_.empty() && !positional_.empty() && !help_requested_) {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected argument '", positional_[0], "' (see '", command_, " --help')"));
  }
  return absl::OkStatus();
}

std::string FlagSet::Help() const {
  std::string out =
      absl::StrCat("usage: ", command_, " [flags]", positional_usage_.empty() ? "" : " ",
                   positional_usage_, "\n\n", summary_, "\n\nflags:\n");
  for (const Flag& f : flags_) {
    absl::StrAppendFormat(&out, "  --%-22s %s", f.name + (f.is_bool ? "" : " V"), f.help);
    if (!f.default_text.empty()) absl::StrAppend(&out, " (default: ", f.default_text, ")");
    absl::StrAppend(&out, "\n");
  }
  absl::StrAppend(&out, "  --help                   print this help\n");
  return out;
}

int RunCommand(FlagSet& flags, int argc, char** argv, const std::function<absl::Status()>& body,
               bool speak) {
  absl::Status status = flags.Parse(argc, argv);
  if (status.ok() && flags.help_requested()) {
    if (speak) std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  if (status.ok()) {
    // The last resort for an allocation the command did not bound first
    // (a shape too large for this machine): one line, not an abort.
    try {
      status = body();
    } catch (const std::bad_alloc&) {
      status = absl::ResourceExhaustedError(
          "out of memory: this machine cannot allocate what the command needs (is the model "
          "or batch too large?)");
    }
  }
  if (status.ok()) return 0;
  if (speak)
    std::fprintf(stderr, "%s: %s\n", flags.command().c_str(),
                 std::string(status.message()).c_str());
  return ExitCodeFor(status);
}

}  // namespace ladder
