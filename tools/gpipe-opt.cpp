// gpipe-opt: runs any gpipe pass over MLIR, for lit tests and debugging.
#include "dialects/nn/NNOps.h"
#include "dialects/pipe/PipeOps.h"
#include "passes/Passes.h"
#include "passes/Pipeline.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<gpipe::nn::NNDialect, gpipe::pipeline::PipeDialect,
                  mlir::func::FuncDialect>();
  gpipe::registerGPipePasses();
  gpipe::registerCompilePipeline();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "gpipe-compile pass driver\n", registry));
}
