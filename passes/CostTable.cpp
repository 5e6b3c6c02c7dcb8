// Reading a measured cost table (CostTable.h).
#include "passes/CostTable.h"

#include "dialects/nn/CostModel.h"

#include "mlir/IR/Location.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <array>
#include <cmath>
#include <map>

using namespace mlir;

std::string gpipe::opSignature(Operation *op) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << op->getName().getStringRef() << "(";
  llvm::interleaveComma(op->getOperandTypes(), os);
  os << ") -> ";
  if (op->getNumResults() == 1) {
    os << op->getResult(0).getType();
  } else {
    os << "(";
    llvm::interleaveComma(op->getResultTypes(), os);
    os << ")";
  }
  return s;
}

llvm::StringRef gpipe::libraryOperandsKey(llvm::StringRef signature) {
  size_t arrow = signature.rfind(" -> ");
  return arrow == llvm::StringRef::npos ? signature
                                        : signature.take_front(arrow);
}

std::string gpipe::deferredCopySignature(Operation *gemm) {
  return "operands of " + opSignature(gemm);
}

namespace {
/// How far apart two positive sizes are: |log(a / b)|.
double apart(double a, double b) { return std::fabs(std::log(a / b)); }
} // namespace

std::optional<double> gpipe::CostTable::lookupOp(Operation *op,
                                                 llvm::StringRef function,
                                                 int64_t rows) const {
  auto name = dyn_cast<NameLoc>(op->getLoc());
  if (!name)
    return std::nullopt;
  return lookupOp(name.getName().getValue(), function, opSignature(op), rows);
}

std::optional<double> gpipe::CostTable::lookupOp(llvm::StringRef node,
                                                 llvm::StringRef function,
                                                 llvm::StringRef signature,
                                                 int64_t rows) const {
  std::string key = opKey(node, function, signature);
  for (bool sameSize : {true, false})
    for (const CostProfile &p : profiles)
      if ((p.rows() == rows) == sameSize)
        if (auto it = p.ops.find(key);
            it != p.ops.end() && it->second.second > 0)
          return it->second.first / double(it->second.second);
  return std::nullopt;
}

std::optional<double>
gpipe::CostTable::lookupScaled(Operation *op, llvm::StringRef function,
                               double callsPerStep) const {
  auto name = dyn_cast<NameLoc>(op->getLoc());
  double now = nn::analyticSeconds(op) * callsPerStep;
  if (!name || !(now > 0))
    return std::nullopt;
  std::string key =
      opKey(name.getName().getValue(), function, op->getName().getStringRef());
  std::optional<double> best;
  double bestApart = 0;
  for (const CostProfile &p : profiles) {
    auto it = p.opsByName.find(key);
    if (it == p.opsByName.end() || !(it->second.second > 0))
      continue;
    double d = apart(now, it->second.second);
    if (!best || d < bestApart) {
      best = it->second.first * now / it->second.second;
      bestApart = d;
    }
  }
  return best;
}

std::optional<gpipe::NodeCost>
gpipe::CostTable::lookup(Operation *op, int64_t microbatches) const {
  std::string sig = opSignature(op);
  auto name = dyn_cast<NameLoc>(op->getLoc());
  llvm::StringRef node = name ? name.getName().getValue() : "";
  if (name)
    for (const CostProfile &p : profiles) {
      auto it = p.nodes.find(node);
      auto known = p.signatureOf.find(node);
      if (it != p.nodes.end() && known != p.signatureOf.end() &&
          known->second == sig)
        return it->second;
    }
  auto same = bySignature.find(sig);
  if (same != bySignature.end() && same->second.second > 0) {
    NodeCost mean = same->second.first;
    double n = double(same->second.second);
    mean.forward /= n;
    mean.backward /= n;
    mean.weight /= n;
    mean.update /= n;
    return mean;
  }
  // The node at other shapes (another micro-batch size), from the profile
  // nearest in size, scaled by the analytic estimates.
  const double now = nn::analyticSeconds(op) * double(microbatches);
  const CostProfile *best = nullptr;
  double bestApart = 0, ratio = 0;
  for (const CostProfile &p : profiles) {
    auto w = p.forwardEstimate.find(node);
    if (!name || !(now > 0) || w == p.forwardEstimate.end() ||
        !(w->second > 0) || p.microbatches <= 0 || !p.nodes.count(node))
      continue;
    double then = w->second * double(p.microbatches);
    if (!best || apart(now, then) < bestApart) {
      best = &p;
      bestApart = apart(now, then);
      ratio = now / then;
    }
  }
  if (!best)
    return std::nullopt;
  NodeCost c = best->nodes.lookup(node);
  c.forward *= ratio;
  c.backward *= ratio;
  c.weight *= ratio;
  c.update *= ratio;
  return c;
}

std::optional<gpipe::NodeCost>
gpipe::CostTable::lookupName(llvm::StringRef name) const {
  for (const CostProfile &p : profiles)
    if (auto it = p.nodes.find(name); it != p.nodes.end())
      return it->second;
  return std::nullopt;
}

int64_t gpipe::CostTable::runtimeBytesFor(int64_t stage, int64_t stages,
                                          const StageTraits *traits) const {
  // The profiled place that stands for this stage: its bytes and split.
  auto chosen = [&]() -> std::pair<int64_t, const RuntimeSplit *> {
    if (stages <= 1)
      return runtimeAlone > 0 ? std::make_pair(runtimeAlone, &splitAlone)
                              : std::make_pair(runtimeBytes, nullptr);
    if (runtimeFirst <= 0 && runtimeLast <= 0 && runtimeMiddle <= 0)
      return {runtimeBytes, nullptr}; // 1-stage profiles only
    if (stage == 0 && runtimeFirst > 0)
      return {runtimeFirst, &splitFirst};
    if (stage == stages - 1 && runtimeLast > 0)
      return {runtimeLast, &splitLast};
    if (stage > 0 && stage < stages - 1) {
      if (runtimeMiddle > 0)
        return {runtimeMiddle, &splitMiddle};
      if (runtimeFirst > 0 && (runtimeLast <= 0 || runtimeFirst < runtimeLast))
        return {runtimeFirst, &splitFirst};
      if (runtimeLast > 0)
        return {runtimeLast, &splitLast};
    }
    return {runtimeBytes, nullptr};
  }();
  const RuntimeSplit *split = chosen.second;
  if (!traits || !split || !split->known())
    return chosen.first;
  int64_t steady = split->steady;
  if (!traits->callsMathLibrary || traits->libraryBytes >= 0)
    steady -= std::min(split->library, steady);
  if (traits->callsMathLibrary && traits->libraryBytes >= 0)
    steady += traits->libraryBytes;
  return split->start + std::max(traits->loadBytes, steady);
}

std::optional<std::pair<double, double>> gpipe::CostTable::linkModel() const {
  if (links.empty())
    return std::nullopt;
  // t = latency + bytes / bandwidth, least squares over the samples.
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (auto [bytes, secs] : links) {
    double x = double(bytes);
    n += 1;
    sx += x;
    sy += secs;
    sxx += x * x;
    sxy += x * secs;
  }
  double den = n * sxx - sx * sx;
  double perByte = den > 0 ? (n * sxy - sx * sy) / den : 0;
  double latency = (sy - perByte * sx) / n;
  if (!(den > 0) || perByte <= 0 || latency < 0) {
    // One size, or a fit that makes no sense: the largest message's time
    // per byte, no latency.
    auto [bytes, secs] =
        *std::max_element(links.begin(), links.end(),
                          [](auto a, auto b) { return a.first < b.first; });
    latency = 0;
    perByte = bytes > 0 ? secs / double(bytes) : 0;
  }
  return std::make_pair(latency, perByte > 0 ? 1.0 / perByte : 0.0);
}

double gpipe::CostTable::transferSeconds(int64_t bytes) const {
  std::optional<std::pair<double, double>> m = linkModel();
  if (!m)
    return 0;
  return m->first + (m->second > 0 ? double(bytes) / m->second : 0.0);
}

std::optional<gpipe::CostTable> gpipe::loadCostTable(llvm::StringRef path,
                                                     std::string &err) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer) {
    err = "cannot read cost table " + path.str() + ": " +
          buffer.getError().message();
    return std::nullopt;
  }
  CostTable table;
  struct Header {
    std::string build;
    int64_t stage = 0, stages = 0, runtime = 0;
    CostTable::RuntimeSplit split;
  };
  std::vector<Header> headers;
  // Per stage: the counted steps and the profile of its last header.
  std::map<int64_t, std::pair<int64_t, size_t>> stageOf;
  // Per profile: the forward op with the largest estimate names a node's
  // signature.
  std::vector<llvm::StringMap<double>> signatureWeight;
  double measured = 0, estimated = 0;
  int64_t lineNo = 0, units = 0;
  auto bad = [&](const std::string &what) {
    err = path.str() + ":" + std::to_string(lineNo) + ": " + what;
    return std::nullopt;
  };
  llvm::StringRef rest = (*buffer)->getBuffer();
  while (!rest.empty()) {
    auto [line, tail] = rest.split('\n');
    rest = tail;
    ++lineNo;
    if (line.trim().empty())
      continue;
    llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(line);
    if (!parsed)
      return bad("not JSON: " + llvm::toString(parsed.takeError()));
    const llvm::json::Object *o = parsed->getAsObject();
    if (!o)
      return bad("not a JSON object");
    if (o->get("gpipe_profile")) {
      std::optional<int64_t> stage = o->getInteger("stage"),
                             steps = o->getInteger("steps");
      if (!stage || !steps)
        return bad("a header without \"stage\" and \"steps\"");
      if (*steps < 1)
        return bad("stage " + std::to_string(*stage) +
                   " counted no steps (profile 2 steps or more: the first "
                   "is not counted)");
      int64_t m = o->getInteger("microbatches").value_or(0);
      int64_t b = o->getInteger("batch_size").value_or(0);
      // The headers of one micro-batch size share a profile.
      size_t p = 0;
      while (p < table.profiles.size() &&
             table.profiles[p].rows() != (m > 0 ? b / m : 0))
        ++p;
      if (p == table.profiles.size()) {
        table.profiles.emplace_back();
        table.profiles.back().microbatches = m;
        table.profiles.back().batchSize = b;
        signatureWeight.emplace_back();
      }
      stageOf[*stage] = {*steps, p};
      const int64_t runtime = o->getInteger("runtime_bytes").value_or(0);
      table.runtimeBytes = std::max<int64_t>(table.runtimeBytes, runtime);
      const bool cudaHeader = o->getString("target").value_or("") == "cuda";
      table.cuda = headers.empty() ? cudaHeader : table.cuda && cudaHeader;
      // Where the stage sat (tables written before "stages" was in the
      // header: the highest stage of its build, below).
      CostTable::RuntimeSplit split;
      if (!cudaHeader) {
        split.start = o->getInteger("start_bytes").value_or(-1);
        split.load = o->getInteger("load_bytes").value_or(0);
        split.library = o->getInteger("library_bytes").value_or(0);
        split.steady = o->getInteger("steady_bytes").value_or(-1);
        if (split.load < 0 || split.library < 0)
          return bad("negative load_bytes or library_bytes");
      }
      headers.push_back({o->getString("build_id").value_or("").str(), *stage,
                         o->getInteger("stages").value_or(0), runtime, split});
      continue;
    }
    if (o->get("link")) {
      std::optional<int64_t> bytes = o->getInteger("bytes");
      std::optional<double> secs = o->getNumber("seconds");
      if (!bytes || !secs || *bytes < 0 || !(*secs >= 0))
        return bad("a link needs \"bytes\" >= 0 and \"seconds\" >= 0");
      table.links.push_back({*bytes, *secs});
      continue;
    }
    std::optional<int64_t> stage = o->getInteger("stage");
    std::optional<double> seconds = o->getNumber("seconds");
    std::optional<int64_t> calls = o->getInteger("calls");
    std::optional<llvm::StringRef> function = o->getString("function");
    const llvm::json::Array *ops = o->getArray("ops");
    if (!stage || !seconds || !calls || !function || !ops)
      return bad("a unit needs \"stage\", \"function\", \"calls\", "
                 "\"seconds\" and \"ops\"");
    auto of = stageOf.find(*stage);
    if (of == stageOf.end())
      return bad("a unit of stage " + std::to_string(*stage) +
                 " before that stage's header");
    if (*function != "forward" && *function != "backward" &&
        *function != "weight" && *function != "update")
      return bad("unknown function '" + function->str() + "'");
    ++units;
    if (std::optional<int64_t> library = o->getInteger("library_bytes"))
      for (const llvm::json::Value &v : *ops)
        if (const llvm::json::Object *op = v.getAsObject())
          if (std::optional<llvm::StringRef> sig = op->getString("signature")) {
            for (llvm::StringRef key : {*sig, libraryOperandsKey(*sig)}) {
              int64_t &bytes = table.libraryBySignature[key];
              bytes = std::max(bytes, *library);
            }
          }
    CostProfile &profile = table.profiles[of->second.second];
    const double steps = double(of->second.first);
    const double perStep = *seconds / steps;
    const double callsPerStep = double(*calls) / steps;
    // The unit's time split between its ops by their estimates.
    double sum = 0;
    for (const llvm::json::Value &v : *ops)
      if (const llvm::json::Object *op = v.getAsObject())
        sum += op->getNumber("estimate").value_or(0);
    for (const llvm::json::Value &v : *ops) {
      const llvm::json::Object *op = v.getAsObject();
      if (!op)
        return bad("an op is not a JSON object");
      double estimate = op->getNumber("estimate").value_or(0);
      double share =
          sum > 0 ? perStep * estimate / sum : perStep / double(ops->size());
      if (estimate > 0) {
        measured += share;
        estimated += estimate * callsPerStep;
      }
      // Ops that name no node count towards the scale only.
      llvm::StringRef node = op->getString("node").value_or("");
      if (node.empty())
        continue;
      llvm::StringRef signature = op->getString("signature").value_or("");
      auto &[opSeconds, opCount] =
          profile.ops[CostTable::opKey(node, *function, signature)];
      opSeconds += share;
      ++opCount;
      auto &[kindSeconds, kindEstimate] = profile.opsByName[CostTable::opKey(
          node, *function, op->getString("op").value_or(""))];
      kindSeconds += share;
      kindEstimate += estimate * callsPerStep;
      NodeCost &c = profile.nodes[node];
      (*function == "forward"    ? c.forward
       : *function == "backward" ? c.backward
       : *function == "weight"   ? c.weight
                                 : c.update) += share;
      if (*function == "forward") {
        double &w = signatureWeight[of->second.second][node];
        if (!profile.signatureOf.count(node) || estimate > w) {
          w = estimate;
          profile.signatureOf[node] = signature.str();
          profile.forwardEstimate[node] = estimate;
        }
      }
    }
  }
  if (stageOf.empty())
    return bad("no profile header (write cost tables with gpipe-run "
               "--profile FILE of a gpipe-compile --profile build)");
  if (units == 0)
    return bad("no timed units");
  if (measured > 0 && estimated > 0)
    table.scale = measured / estimated;
  // Per place (alone, first, last, between): its runtime bytes and split,
  // each part the largest of its headers; a place's split is unknown when
  // any of them lacks it (a table joined from older runtimes).
  int64_t *bytesOf[] = {&table.runtimeAlone, &table.runtimeFirst,
                        &table.runtimeLast, &table.runtimeMiddle};
  CostTable::RuntimeSplit *splitOf[] = {&table.splitAlone, &table.splitFirst,
                                        &table.splitLast, &table.splitMiddle};
  std::array<bool, 4> seen{}, lacking{};
  for (const Header &h : headers) {
    int64_t stages = h.stages;
    if (stages <= 0)
      for (const Header &o : headers)
        if (o.build == h.build)
          stages = std::max(stages, o.stage + 1);
    const int place = stages <= 1             ? 0
                      : h.stage == 0          ? 1
                      : h.stage == stages - 1 ? 2
                                              : 3;
    *bytesOf[place] = std::max(*bytesOf[place], h.runtime);
    CostTable::RuntimeSplit &split = *splitOf[place];
    lacking[place] = lacking[place] || !h.split.known();
    if (lacking[place]) {
      split = CostTable::RuntimeSplit();
    } else if (!seen[place]) {
      split = h.split;
    } else {
      split.start = std::max(split.start, h.split.start);
      split.load = std::max(split.load, h.split.load);
      split.library = std::max(split.library, h.split.library);
      split.steady = std::max(split.steady, h.split.steady);
    }
    seen[place] = true;
  }
  for (const CostProfile &p : table.profiles)
    for (auto &entry : p.nodes) {
      auto sig = p.signatureOf.find(entry.getKey());
      if (sig == p.signatureOf.end() || sig->second.empty())
        continue;
      auto &[cost, count] = table.bySignature[sig->second];
      cost += entry.getValue();
      ++count;
    }
  return table;
}
