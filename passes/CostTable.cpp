// Reading a measured cost table (CostTable.h).
#include "passes/CostTable.h"

#include "dialects/nn/CostModel.h"

#include "mlir/IR/Location.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

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

std::optional<gpipe::NodeCost>
gpipe::CostTable::lookup(Operation *op, int64_t microbatches) const {
  std::string sig = opSignature(op);
  auto name = dyn_cast<NameLoc>(op->getLoc());
  auto it = name ? nodes.find(name.getName().getValue()) : nodes.end();
  if (it != nodes.end()) {
    auto known = signatureOf.find(it->getKey());
    if (known != signatureOf.end() && known->second == sig)
      return it->second;
  }
  auto same = bySignature.find(sig);
  if (same == bySignature.end() || same->second.second == 0) {
    // The node at other shapes (another micro-batch size).
    auto w = it != nodes.end() ? forwardEstimate.find(it->getKey())
                               : forwardEstimate.end();
    double now = nn::analyticSeconds(op) * double(microbatches);
    if (w == forwardEstimate.end() || !(w->second > 0) || !(now > 0) ||
        this->microbatches <= 0)
      return std::nullopt;
    double ratio = now / (w->second * double(this->microbatches));
    NodeCost c = it->second;
    c.forward *= ratio;
    c.backward *= ratio;
    c.weight *= ratio;
    c.update *= ratio;
    return c;
  }
  NodeCost mean = same->second.first;
  double n = double(same->second.second);
  mean.forward /= n;
  mean.backward /= n;
  mean.weight /= n;
  mean.update /= n;
  return mean;
}

std::string gpipe::deferredCopySignature(Operation *gemm) {
  return "operands of " + opSignature(gemm);
}

std::optional<double> gpipe::CostTable::lookupOp(Operation *op,
                                                 llvm::StringRef function) const {
  auto name = dyn_cast<NameLoc>(op->getLoc());
  if (!name)
    return std::nullopt;
  return lookupOp(name.getName().getValue(), function, opSignature(op));
}

std::optional<double>
gpipe::CostTable::lookupOp(llvm::StringRef node, llvm::StringRef function,
                           llvm::StringRef signature) const {
  auto it = ops.find(opKey(node, function, signature));
  if (it == ops.end() || it->second.second == 0)
    return std::nullopt;
  return it->second.first / double(it->second.second);
}

std::optional<double>
gpipe::CostTable::lookupScaled(Operation *op, llvm::StringRef function,
                               double callsPerStep) const {
  auto name = dyn_cast<NameLoc>(op->getLoc());
  if (!name)
    return std::nullopt;
  auto it = opsByName.find(opKey(name.getName().getValue(), function,
                                 op->getName().getStringRef()));
  if (it == opsByName.end() || !(it->second.second > 0))
    return std::nullopt;
  double estimate = nn::analyticSeconds(op) * callsPerStep;
  if (!(estimate > 0))
    return std::nullopt;
  return it->second.first * estimate / it->second.second;
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
  table.path = path.str();
  std::map<int64_t, int64_t> stepsOfStage;
  // The forward op with the largest estimate names a node's signature.
  llvm::StringMap<double> signatureWeight;
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
      stepsOfStage[*stage] = *steps;
      table.threads = o->getInteger("threads").value_or(0);
      table.microbatches = o->getInteger("microbatches").value_or(0);
      table.batchSize = o->getInteger("batch_size").value_or(0);
      table.runtimeBytes = std::max<int64_t>(
          table.runtimeBytes, o->getInteger("runtime_bytes").value_or(0));
      if (auto t = o->getString("target"))
        table.target = t->str();
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
    auto steps = stepsOfStage.find(*stage);
    if (steps == stepsOfStage.end())
      return bad("a unit of stage " + std::to_string(*stage) +
                 " before that stage's header");
    if (*function != "forward" && *function != "backward" &&
        *function != "weight" && *function != "update")
      return bad("unknown function '" + function->str() + "'");
    ++units;
    const double perStep = *seconds / double(steps->second);
    const double callsPerStep = double(*calls) / double(steps->second);
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
      double share = sum > 0 ? perStep * estimate / sum
                             : perStep / double(ops->size());
      if (estimate > 0) {
        measured += share;
        estimated += estimate * callsPerStep;
      }
      llvm::StringRef node = op->getString("node").value_or("");
      if (node.empty()) {
        table.unattributed += share;
        continue;
      }
      auto &[opSeconds, opCount] = table.ops[CostTable::opKey(
          node, *function, op->getString("signature").value_or(""))];
      opSeconds += share;
      ++opCount;
      auto &[kindSeconds, kindEstimate] = table.opsByName[CostTable::opKey(
          node, *function, op->getString("op").value_or(""))];
      kindSeconds += share;
      kindEstimate += estimate * callsPerStep;
      NodeCost &c = table.nodes[node];
      (*function == "forward"    ? c.forward
       : *function == "backward" ? c.backward
       : *function == "weight"   ? c.weight
                                 : c.update) += share;
      if (*function == "forward") {
        double &w = signatureWeight[node];
        if (!table.signatureOf.count(node) || estimate > w) {
          w = estimate;
          table.signatureOf[node] = op->getString("signature").value_or("").str();
          table.forwardEstimate[node] = estimate;
        }
      }
    }
  }
  if (stepsOfStage.empty())
    return bad("no profile header (write cost tables with gpipe-run "
               "--profile FILE of a gpipe-compile --profile build)");
  if (units == 0)
    return bad("no timed units");
  if (measured > 0 && estimated > 0)
    table.scale = measured / estimated;
  for (auto &entry : table.nodes) {
    auto sig = table.signatureOf.find(entry.getKey());
    if (sig == table.signatureOf.end() || sig->second.empty())
      continue;
    auto &[cost, count] = table.bySignature[sig->second];
    cost += entry.getValue();
    ++count;
  }
  return table;
}
