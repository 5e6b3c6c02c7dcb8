// The nn dialect: registration.
#include "dialects/nn/NNOps.h"

using namespace mlir;
using namespace gpipe::nn;

#include "dialects/nn/NNDialect.cpp.inc"

void NNDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/nn/NNOps.cpp.inc"
      >();
}
