#include "src/checkpoint/manifest.h"

#include <cmath>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "src/core/config.h"
#include "src/core/crc32.h"
#include "src/core/status.h"
#include "src/model/parameters.h"

namespace ladder {
namespace {

constexpr char kHeader[] = "ladder-checkpoint";

absl::Status Bad(const std::string& source, int line, absl::string_view what) {
  return absl::DataLossError(absl::StrCat(source, ":", line, ": ", what));
}

constexpr int64_t kMaxParameters = int64_t{1} << 36;
constexpr int64_t kMaxMappedElements = int64_t{1} << 28;

template <typename T>
bool ParseInt(absl::string_view s, T* out, T min = 0, T max = std::numeric_limits<T>::max()) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(s, &v) || v < static_cast<int64_t>(min) || v > static_cast<int64_t>(max))
    return false;
  *out = static_cast<T>(v);
  return true;
}

bool ParseHex(absl::string_view s, uint32_t* out) {
  return s.size() <= 8 && absl::SimpleHexAtoi(s, out);
}

int64_t Dim0(const ParamSpec& s) { return s.shape[0]; }
int64_t Dim1(const ParamSpec& s) { return s.shape.size() == 2 ? s.shape[1] : 1; }

}  // namespace

const char* PieceKindName(PieceKind k) {
  switch (k) {
    case PieceKind::kWeights:
      return "w";
    case PieceKind::kMomentM:
      return "m";
    case PieceKind::kMomentV:
      return "v";
  }
  return "?";
}

int64_t Piece::numel() const {
  int64_t rows_total = 0;
  for (const RowRun& r : rows) rows_total += r.count;
  return rows_total * cols;
}

std::string SerializeManifest(const Manifest& m) {
  std::string out = absl::StrCat(kHeader, " ", kManifestVersion, "\n");
  absl::StrAppend(&out, "step ", m.step, "\ntokens ", m.tokens, "\nseed ", m.seed, "\n");
  absl::StrAppend(&out, "layout ", m.dp, " ", m.tp, " ", m.pp, " ", m.zero, "\n");
  if (m.cp > 1) absl::StrAppend(&out, "context ", m.cp, "\n");
  absl::StrAppend(&out, "loader ", m.loader_epoch, " ", m.loader_index, "\n");
  absl::StrAppendFormat(&out, "guard %d %.17g %.17g %d %d\n", m.guard.count, m.guard.mean,
                        m.guard.var, m.guard.skipped, m.guard.consecutive_bad);
  for (absl::string_view line : absl::StrSplit(m.model.ToText(), '\n', absl::SkipEmpty())) {
    absl::StrAppend(&out, "model ", line, "\n");
  }
  const std::vector<ParamSpec> specs = GptParameterSpecs(m.model);
  for (size_t i = 0; i < specs.size(); ++i) {
    absl::StrAppend(&out, "tensor ", i, " ", specs[i].name, " f32 ",
                    absl::StrJoin(specs[i].shape, " "), "\n");
  }
  for (size_t i = 0; i < m.files.size(); ++i) {
    absl::StrAppendFormat(&out, "file %d %s %d\n", i, m.files[i].name, m.files[i].bytes);
  }
  for (const Piece& p : m.pieces) {
    std::vector<std::string> runs;
    for (const RowRun& r : p.rows) runs.push_back(absl::StrCat(r.start, "+", r.count));
    absl::StrAppendFormat(&out, "piece %s %d %d %d %s %d %d %08x\n", PieceKindName(p.kind),
                          p.tensor, p.file, p.offset, absl::StrJoin(runs, ","), p.col_start, p.cols,
                          p.crc);
  }
  absl::StrAppendFormat(&out, "end %08x\n", Crc32(0, out.data(), out.size()));
  return out;
}

absl::StatusOr<Manifest> ParseManifest(absl::string_view text, const std::string& source) {
  // The last line checksums everything before it.
  const size_t end_at = text.rfind("\nend ");
  if (end_at == absl::string_view::npos) return Bad(source, 0, "no 'end' line: truncated");
  uint32_t want = 0;
  absl::string_view end_line = text.substr(end_at + 5);
  if (!end_line.empty() && end_line.back() == '\n') end_line.remove_suffix(1);
  if (!ParseHex(end_line, &want)) return Bad(source, 0, "malformed 'end' line");
  if (Crc32(0, text.data(), end_at + 1) != want) {
    return Bad(source, 0, "checksum mismatch: the manifest is corrupt");
  }
  Manifest m;
  std::string model_text;
  std::vector<ParamSpec> specs;
  size_t next_tensor = 0;
  bool have_header = false, have_layout = false, have_loader = false;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text.substr(0, end_at), '\n')) {
    ++line_no;
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.empty()) continue;
    const absl::string_view key = f[0];
    auto need = [&](size_t n) { return f.size() == n; };
    if (!have_header) {
      int version = 0;
      if (key != kHeader || !need(2) || !ParseInt(f[1], &version)) {
        return Bad(source, line_no, "not a ladder checkpoint manifest");
      }
      if (version != kManifestVersion) {
        return Bad(source, line_no,
                   absl::StrCat("format version ", version, ", expected ", kManifestVersion));
      }
      have_header = true;
    } else if (key == "step" && need(2) && ParseInt(f[1], &m.step)) {
    } else if (key == "tokens" && need(2) && ParseInt(f[1], &m.tokens)) {
    } else if (key == "seed" && need(2) && ParseInt<uint64_t>(f[1], &m.seed, 0, INT64_MAX)) {
    } else if (key == "layout" && need(5) && ParseInt(f[1], &m.dp, 1, 1 << 20) &&
               ParseInt(f[2], &m.tp, 1, 1 << 20) && ParseInt(f[3], &m.pp, 1, 1 << 20) &&
               ParseInt(f[4], &m.zero, 0, 1)) {
      have_layout = true;
    } else if (key == "context" && need(2) && ParseInt(f[1], &m.cp, 2, 1 << 20)) {
    } else if (key == "loader" && need(3) &&
               ParseInt<uint64_t>(f[1], &m.loader_epoch, 0, INT64_MAX) &&
               ParseInt<uint64_t>(f[2], &m.loader_index, 0, INT64_MAX)) {
      have_loader = true;
    } else if (key == "guard" && need(6) && ParseInt(f[1], &m.guard.count) &&
               absl::SimpleAtod(f[2], &m.guard.mean) && std::isfinite(m.guard.mean) &&
               absl::SimpleAtod(f[3], &m.guard.var) && std::isfinite(m.guard.var) &&
               ParseInt(f[4], &m.guard.skipped) && ParseInt(f[5], &m.guard.consecutive_bad)) {
    } else if (key == "model" && f.size() >= 2 && specs.empty()) {
      absl::StrAppend(&model_text, line.substr(line.find(key) + key.size()), "\n");
    } else if (key == "tensor") {
      if (specs.empty()) {
        ASSIGN_OR_RETURN(KeyValueConfig kv, KeyValueConfig::ParseText(model_text, source));
        const absl::Status s = m.model.ReadFrom(kv);  // validates the shape
        if (!s.ok()) return Bad(source, line_no, absl::StrCat("bad model config: ", s.message()));
        // Bounds what the checks below may allocate (Validate bounds n_layer).
        if (m.model.NumParameters() > kMaxParameters) {
          return Bad(source, line_no, "implausibly large model");
        }
        specs = GptParameterSpecs(m.model);
      }
      // Each tensor line must restate the model's own tensor, in order.
      if (next_tensor >= specs.size() || f.size() < 4 || f[1] != absl::StrCat(next_tensor) ||
          f[2] != specs[next_tensor].name || f[3] != "f32" ||
          absl::StrJoin(f.begin() + 4, f.end(), " ") !=
              absl::StrJoin(specs[next_tensor].shape, " ")) {
        return Bad(source, line_no, "tensor line does not match the model config");
      }
      ++next_tensor;
    } else if (key == "file" && need(4)) {
      ShardFile sf;
      int index = -1;
      if (!ParseInt(f[1], &index) || index != static_cast<int>(m.files.size()) ||
          !ParseInt(f[3], &sf.bytes) || f[2].find('/') != absl::string_view::npos || f[2].empty() ||
          f[2][0] == '.') {
        return Bad(source, line_no, "malformed file line");
      }
      sf.name = std::string(f[2]);
      m.files.push_back(sf);
    } else if (key == "piece" && need(9)) {
      if (next_tensor != specs.size() || specs.empty()) {
        return Bad(source, line_no, "piece before the tensor list is complete");
      }
      Piece p;
      if (f[1] == "w") {
        p.kind = PieceKind::kWeights;
      } else if (f[1] == "m") {
        p.kind = PieceKind::kMomentM;
      } else if (f[1] == "v") {
        p.kind = PieceKind::kMomentV;
      } else {
        return Bad(source, line_no, "unknown piece kind");
      }
      if (!ParseInt(f[2], &p.tensor, 0, static_cast<int>(specs.size()) - 1) ||
          !ParseInt(f[3], &p.file, 0, static_cast<int>(m.files.size()) - 1) ||
          !ParseInt(f[4], &p.offset) || !ParseInt(f[6], &p.col_start) || !ParseInt(f[7], &p.cols) ||
          !ParseHex(f[8], &p.crc)) {
        return Bad(source, line_no, "malformed piece line");
      }
      const ParamSpec& spec = specs[p.tensor];
      int64_t rows_total = 0;
      for (absl::string_view run : absl::StrSplit(f[5], ',')) {
        std::pair<absl::string_view, absl::string_view> sc = absl::StrSplit(run, '+');
        RowRun r;
        if (!ParseInt(sc.first, &r.start) || !ParseInt(sc.second, &r.count, int64_t{1}) ||
            r.start > Dim0(spec) || r.count > Dim0(spec) - r.start) {
          return Bad(source, line_no, "row run outside the tensor");
        }
        p.rows.push_back(r);
        rows_total += r.count;
        if (rows_total > Dim0(spec)) return Bad(source, line_no, "more rows than the tensor has");
      }
      if (p.cols < 1 || p.col_start > Dim1(spec) || p.cols > Dim1(spec) - p.col_start) {
        return Bad(source, line_no, "column range outside the tensor");
      }
      const int64_t bytes = p.numel() * 4;
      if (p.offset < kShardHeaderBytes || bytes > m.files[p.file].bytes ||
          p.offset > m.files[p.file].bytes - bytes) {
        return Bad(source, line_no, "piece extends past its shard file");
      }
      m.pieces.push_back(std::move(p));
    } else {
      return Bad(source, line_no, absl::StrCat("unexpected line '", line.substr(0, 40), "'"));
    }
  }
  if (!have_header || !have_layout || !have_loader || specs.empty() ||
      next_tensor != specs.size()) {
    return Bad(source, line_no, "incomplete manifest");
  }
  // Every kind must cover every element of every tensor exactly once: the
  // sizes must add up, and (for tensors small enough to map) no element may
  // be covered twice.
  for (int k = 0; k < kNumPieceKinds; ++k) {
    for (size_t t = 0; t < specs.size(); ++t) {
      int64_t total = 0;
      for (const Piece& p : m.pieces) {
        if (static_cast<int>(p.kind) == k && p.tensor == static_cast<int>(t)) total += p.numel();
      }
      if (total != specs[t].numel()) {
        return Bad(source, 0,
                   absl::StrCat("tensor ", specs[t].name, " is not covered exactly by its '",
                                PieceKindName(static_cast<PieceKind>(k)), "' pieces"));
      }
      if (specs[t].numel() > kMaxMappedElements) continue;
      std::vector<bool> seen(static_cast<size_t>(specs[t].numel()), false);
      int64_t covered = 0;
      for (const Piece& p : m.pieces) {
        if (static_cast<int>(p.kind) != k || p.tensor != static_cast<int>(t)) continue;
        for (const RowRun& r : p.rows) {
          for (int64_t row = r.start; row < r.start + r.count; ++row) {
            for (int64_t c = p.col_start; c < p.col_start + p.cols; ++c) {
              auto at = static_cast<size_t>(row * Dim1(specs[t]) + c);
              if (seen[at]) {
                return Bad(source, 0,
                           absl::StrCat("tensor ", specs[t].name, " is covered twice by '",
                                        PieceKindName(p.kind), "' pieces"));
              }
              seen[at] = true;
              ++covered;
            }
          }
        }
      }
      if (covered != specs[t].numel()) {
        return Bad(source, 0,
                   absl::StrCat("tensor ", specs[t].name, " is not fully covered by '",
                                PieceKindName(static_cast<PieceKind>(k)), "' pieces"));
      }
    }
  }
  return m;
}

}  // namespace ladder
