// The pipe dialect's ops.
#ifndef GPIPE_DIALECTS_PIPE_PIPEOPS_H
#define GPIPE_DIALECTS_PIPE_PIPEOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
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

#define GET_OP_CLASSES
#include "dialects/pipe/PipeOps.h.inc"

#endif
