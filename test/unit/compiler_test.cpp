// Unit tests of compiler pieces: weight file names, broadcasting, memory plan.
#include "compiler/CppEmitter.h"
#include "dialects/nn/NNOps.h"
#include "dialects/pipe/PipeOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

using namespace mlir;

TEST(WeightFileName, SanitizesAndDeduplicates) {
  std::vector<std::string> taken;
  EXPECT_EQ(gpipe::weightFileName("fc1.weight", taken), "fc1.weight.npy");
  EXPECT_EQ(gpipe::weightFileName("a/b:c", taken), "a_b_c.npy");
  // "a_b_c" collides with the sanitized "a/b:c".
  EXPECT_EQ(gpipe::weightFileName("a_b_c", taken), "a_b_c.1.npy");
  EXPECT_EQ(gpipe::weightFileName(".hidden", taken), "p.hidden.npy");
  EXPECT_EQ(gpipe::weightFileName("", taken), "p.npy");
}

TEST(BroadcastShapes, NumpyRules) {
  using V = llvm::SmallVector<int64_t>;
  EXPECT_EQ(*gpipe::nn::broadcastShapes({4, 1, 3}, {5, 1}), (V{4, 5, 3}));
  EXPECT_EQ(*gpipe::nn::broadcastShapes({}, {2, 3}), (V{2, 3}));
  EXPECT_EQ(*gpipe::nn::broadcastShapes({2, 3}, {3}), (V{2, 3}));
  EXPECT_TRUE(failed(gpipe::nn::broadcastShapes({2, 3}, {2})));
  EXPECT_TRUE(failed(gpipe::nn::broadcastShapes({4, 3}, {5, 3})));
}

namespace {
/// A chain of `depth` tanh layers on [64, 256] with a loss, already through
/// autodiff-like gradient ops, to exercise slot reuse.
std::string chainIR(int depth) {
  std::string ir = "func.func @step(%x: tensor<64x256xf32> {nn.input = \"x\"}, "
                   "%y: tensor<64xi64> {nn.input = \"y\"}) -> (tensor<f32> "
                   "{nn.loss}) {\n";
  ir += "  %w = nn.param \"w\" : tensor<256x256xf32>\n";
  std::string prev = "%x";
  for (int i = 0; i < depth; ++i) {
    std::string h = "%h" + std::to_string(i), t = "%t" + std::to_string(i);
    ir += "  " + h + " = nn.gemm " + prev +
          ", %w : (tensor<64x256xf32>, tensor<256x256xf32>) -> "
          "tensor<64x256xf32>\n";
    ir += "  " + t + " = nn.tanh " + h + " : tensor<64x256xf32>\n";
    prev = t;
  }
  ir += "  %l = nn.softmax_cross_entropy " + prev +
        ", %y : tensor<64x256xf32>, tensor<64xi64>\n";
  ir += "  return %l : tensor<f32>\n}\n";
  return ir;
}
} // namespace

TEST(MemoryPlan, ReusesSlotsOfDeadTemporaries) {
  MLIRContext ctx;
  ctx.loadDialect<gpipe::nn::NNDialect, gpipe::pipeline::PipeDialect,
                  func::FuncDialect>();
  const int depth = 10;
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(chainIR(depth), &ctx);
  ASSERT_TRUE(module);
  auto func = *module->getOps<func::FuncOp>().begin();
  FailureOr<gpipe::EmittedStage> stage = gpipe::emitStageCpp(func, "t");
  ASSERT_TRUE(succeeded(stage));
  const int64_t tensor = 64 * 256 * 4;
  // Forward only: at most an operand and a result (plus the scalar loss) are
  // alive at once, whereas 2*depth tensors are computed.
  EXPECT_LE(stage->memory.activationBytes, 2 * tensor + 64);
  EXPECT_EQ(stage->memory.parameterBytes, 256 * 256 * 4);
  EXPECT_EQ(stage->memory.inputBytes, tensor + 64 * 8);
  EXPECT_EQ(stage->memory.arenaBytes,
            stage->memory.parameterBytes + stage->memory.inputBytes +
                stage->memory.activationBytes);
  EXPECT_EQ(stage->flops, depth * (2LL * 64 * 256 * 256 + 8LL * 64 * 256) +
                              6LL * 64 * 256);
}
