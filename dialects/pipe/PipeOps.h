// The pipe dialect's ops.
#ifndef GPIPE_DIALECTS_PIPE_PIPEOPS_H
#define GPIPE_DIALECTS_PIPE_PIPEOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/pipe/PipeDialect.h"

#include <array>

#define GET_OP_CLASSES
#include "dialects/pipe/PipeOps.h.inc"

namespace gpipe::pipeline {
/// The stage (executable) holding each piece of `module` (each of its
/// pipe.stages virtual stages): the stage whose pipe.schedule names the
/// piece's forward function, -1 for a piece no schedule names.
llvm::SmallVector<int64_t> stagesOfPieces(mlir::ModuleOp module);
} // namespace gpipe::pipeline

#endif
