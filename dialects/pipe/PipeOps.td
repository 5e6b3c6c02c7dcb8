// The pipe dialect: pipeline structure and the optimizer update.
#ifndef GPIPE_PIPE_OPS
#define GPIPE_PIPE_OPS

include "mlir/IR/OpBase.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/SymbolInterfaces.td"
include "dialects/pipe/PipeAttrs.td"

class Pipe_Op<string mnemonic, list<Trait> traits = []>
    : Op<Pipe_Dialect, mnemonic, traits>;

def Pipe_F32Tensor : StaticShapeTensorOf<[F32]>;
def Pipe_Tensor : StaticShapeTensorOf<[F32, I64]>;

def Pipe_SGDUpdateOp : Pipe_Op<"sgd_update", [AllTypesMatch<["param", "grad"]>]> {
  let summary = "torch.optim.SGD update of one parameter, in place";
  let description = [{
    Updates the storage of `$param` (an `nn.param` result) with its gradient,
    following torch.optim.SGD (dampening 0): weight decay is added to the
    gradient, momentum keeps one buffer per parameter (initialised to the first
    gradient), Nesterov uses `g + momentum * buf`. The new value is what the
    parameter reads at the next step; no use of `$param` may follow the update.
  }];
  let arguments = (ins Pipe_F32Tensor:$param, Pipe_F32Tensor:$grad,
                       F64Attr:$lr, F64Attr:$momentum, F64Attr:$weight_decay,
                       BoolAttr:$nesterov);
  let assemblyFormat = "$param `,` $grad attr-dict `:` type($param)";
  let hasVerifier = 1;
}

def Pipe_AdamUpdateOp : Pipe_Op<"adam_update", [AllTypesMatch<["param", "grad"]>]> {
  let summary = "torch.optim.Adam / AdamW update of one parameter, in place";
  let description = [{
    Adam with bias correction (amsgrad off). With `decoupled` (AdamW) weight
    decay scales the parameter by `1 - lr * weight_decay` before the update;
    without it (Adam) weight decay is added to the gradient. Keeps two moment
    buffers per parameter, zero at the start.
  }];
  let arguments = (ins Pipe_F32Tensor:$param, Pipe_F32Tensor:$grad,
                       F64Attr:$lr, F64Attr:$beta1, F64Attr:$beta2,
                       F64Attr:$eps, F64Attr:$weight_decay, BoolAttr:$decoupled);
  let assemblyFormat = "$param `,` $grad attr-dict `:` type($param)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Communication between stages.
//===----------------------------------------------------------------------===//

def Pipe_SendOp : Pipe_Op<"send", [MemoryEffects<[MemWrite]>]> {
  let summary = "blocking send of a tensor to another stage";
  let description = [{
    Sends `$value` to stage `$peer`. `$tag` names the boundary tensor: the
    matching `pipe.recv` in stage `$peer` names this stage and the same tag,
    with the same type. Blocking: under the checked semantics a send may wait
    until the receiver has posted its receive.

    With `per_step` the send runs once per step: in the first action of its
    stage's schedule that runs its function (for a forward, the forward of
    the first micro-batch the stage runs), not in the others. Its receive is
    `per_step` too. (gpipe-outline-stages sends a weight tied across stages
    this way.)

    ```mlir
    pipe.send %h to 1 tag 0 : tensor<8x64xf32>
    pipe.send %w to 3 tag 7 per_step : tensor<50x16xf32>
    ```
  }];
  let arguments = (ins Pipe_Tensor:$value, I64Attr:$peer, I64Attr:$tag,
                       UnitAttr:$per_step);
  let assemblyFormat = [{
    $value `to` $peer `tag` $tag (`per_step` $per_step^)? attr-dict `:`
    type($value)
  }];
  let hasVerifier = 1;
}

def Pipe_RecvOp : Pipe_Op<"recv", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "blocking receive of a tensor from another stage";
  let description = [{
    Receives the tensor that stage `$peer` sends with `$tag`.

    With `per_step` (its send's too) the receive runs once per step, in the
    first action of its stage's schedule that runs its function; in the
    step's later actions the result is the value received then (it lives in
    the stage's long-lived memory, not in a micro-batch's stash).

    ```mlir
    %h = pipe.recv from 0 tag 0 : tensor<8x64xf32>
    %w = pipe.recv from 0 tag 7 per_step : tensor<50x16xf32>
    ```
  }];
  let arguments = (ins I64Attr:$peer, I64Attr:$tag, UnitAttr:$per_step);
  let results = (outs Pipe_Tensor:$value);
  let assemblyFormat = [{
    `from` $peer `tag` $tag (`per_step` $per_step^)? attr-dict `:` type($value)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Gradient accumulation and the loss.
//===----------------------------------------------------------------------===//

def Pipe_AccumulateGradOp : Pipe_Op<"accumulate_grad", [MemoryEffects<[MemRead, MemWrite]>,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "adds a micro-batch's gradient to a parameter's accumulator";
  let description = [{
    Each parameter (`$param`, an `nn.parameter` symbol whose type is
    `$grad`'s) has one gradient accumulator, zero at the start of every
    mini-batch. A stage's backward adds each micro-batch's gradient with this
    op; its update reads the sum with `pipe.accumulated_grad`.

    How the gradient gets there is decided by lowering passes and marked
    here (code generation follows the marks):
    - `in_place` (gpipe-accumulate-in-place): the `nn.gemm` computing
      `$grad`, whose only reader this op is, adds its product into the
      accumulator itself (beta 1); this op emits nothing.
    - `overwrite` (with `in_place`; one micro-batch, the parameter's only
      contribution): the GEMM writes the accumulator (beta 0), which then
      needs no clearing.
    - `deferred` (with `in_place`; gpipe-split-weight-grad): the GEMM is a
      weight gradient `A^T B`; each micro-batch's backward keeps its two
      operands and the update computes it once over all micro-batches.
  }];
  let arguments = (ins Pipe_F32Tensor:$grad, FlatSymbolRefAttr:$param,
                   UnitAttr:$in_place, UnitAttr:$overwrite,
                   UnitAttr:$deferred);
  let assemblyFormat = "$grad `to` $param attr-dict `:` type($grad)";
  let hasVerifier = 1;
}

def Pipe_AccumulatedGradOp : Pipe_Op<"accumulated_grad", [MemoryEffects<[MemRead]>,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "the gradient of a parameter summed over the mini-batch";
  let arguments = (ins FlatSymbolRefAttr:$param);
  let results = (outs Pipe_F32Tensor:$grad);
  let assemblyFormat = "$param attr-dict `:` type($grad)";
}

def Pipe_ReportLossOp : Pipe_Op<"report_loss", [MemoryEffects<[MemWrite]>]> {
  let summary = "adds a micro-batch's share of the loss to the step's loss";
  let description = [{
    The loss of a micro-batch is its share of the mini-batch loss (the
    micro-batching pass scales it), so the step's loss is the sum of the
    reported values.
  }];
  let arguments = (ins Pipe_F32Tensor:$loss);
  let assemblyFormat = "$loss attr-dict `:` type($loss)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Rematerialization.
//===----------------------------------------------------------------------===//

def Pipe_RematOp : Pipe_Op<"remat", [IsolatedFromAbove,
    SingleBlockImplicitTerminator<"YieldOp">,
    RecursiveMemoryEffects]> {
  let summary = "forward ops recomputed inside the backward";
  let description = [{
    The region recomputes forward values from `$inputs` (a stage's stashed
    boundary inputs: the graph inputs it reads and the tensors it receives)
    and yields them as the op's results. Only pure `nn` ops may appear inside;
    parameters and constants are re-declared there (the region is isolated).

    ```mlir
    %h = pipe.remat (%x) : (tensor<8x16xf32>) -> tensor<8x64xf32> {
    ^bb0(%in: tensor<8x16xf32>):
      ...
      pipe.yield %r : tensor<8x64xf32>
    }
    ```
  }];
  let arguments = (ins Variadic<Pipe_Tensor>:$inputs);
  let results = (outs Variadic<Pipe_Tensor>:$outputs);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    `(` $inputs `)` attr-dict `:` functional-type($inputs, $outputs) $body
  }];
  let hasVerifier = 1;
}

def Pipe_YieldOp : Pipe_Op<"yield", [Pure, Terminator, ReturnLike,
    HasParent<"RematOp">]> {
  let summary = "yields the recomputed values of a pipe.remat region";
  let arguments = (ins Variadic<Pipe_Tensor>:$values);
  let builders = [OpBuilder<(ins), [{ }]>];
  let assemblyFormat = "($values^ `:` type($values))? attr-dict";
}

//===----------------------------------------------------------------------===//
// Schedule.
//===----------------------------------------------------------------------===//

def Pipe_ScheduleOp : Pipe_Op<"schedule", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "the ordered actions a stage runs for one mini-batch";
  let description = [{
    `$actions` lists, in order, what stage `$stage` (an executable, an MPI
    rank) runs for one mini-batch: the forward (`#pipe.action<forward, mb =
    m>`) and backward (`#pipe.action<backward, mb = m>`) of every micro-batch
    m in [0, M) of every model chunk it holds, and the optimizer update
    (`#pipe.action<update>`, last), where M is the module's
    `pipe.microbatches` (1 if absent). Each (chunk, micro-batch)'s forward
    comes before its backward.

    A stage holds one model chunk, or several (interleaved schedules: a
    chunk is a virtual stage, a piece of the model that gpipe-partition cut
    and gpipe-outline-stages outlined). `$forward`, `$backward` and `$update`
    name each chunk's functions, one symbol per chunk (written `@f` for one
    chunk, `[@f0, @f1]` for several); the functions of chunk c belong to one
    virtual stage (their `pipe.stage`), which is this stage itself when it
    holds one chunk. An action with `chunk = c` runs chunk c's function; the
    update action runs every chunk's update function, from the last chunk to
    the first. The sends and receives of an action are those of its
    function, in order; a send's or receive's peer is a virtual stage. The
    `gpipe-check-schedule` pass checks that all stages' schedules together
    place every virtual stage once, pair every send with one receive and
    cannot deadlock.

    `$stash_slots` (default M) is how many micro-batches' stashes each chunk
    keeps: micro-batch m of a chunk uses its slot `m mod stash_slots`. The
    verifier checks that no forward reuses a slot whose backward has not
    run.

    ```mlir
    pipe.schedule stage 0 forward @stage0_forward backward @stage0_backward
        update @stage0_update actions [#pipe.action<forward, mb = 0>,
        #pipe.action<forward, mb = 1>, #pipe.action<backward, mb = 1>,
        #pipe.action<backward, mb = 0>, #pipe.action<update>]
    pipe.schedule stage 1 forward @stage1_forward backward @stage1_backward
        update @stage1_update actions [#pipe.action<forward, mb = 0>,
        #pipe.action<backward, mb = 0>, #pipe.action<forward, mb = 1>,
        #pipe.action<backward, mb = 1>, #pipe.action<update>] stash_slots 1
    // Two chunks: virtual stages 0 and 2 of four.
    pipe.schedule stage 0 forward [@stage0_forward, @stage2_forward]
        backward [@stage0_backward, @stage2_backward]
        update [@stage0_update, @stage2_update]
        actions [#pipe.action<forward, mb = 0>,
        #pipe.action<forward, mb = 0, chunk = 1>, ...]
    ```
  }];
  let arguments = (ins I64Attr:$stage, FlatSymbolRefArrayAttr:$forward,
                   FlatSymbolRefArrayAttr:$backward,
                   FlatSymbolRefArrayAttr:$update,
                   Pipe_ActionArrayAttr:$actions,
                   OptionalAttr<I64Attr>:$stash_slots);
  let assemblyFormat = [{
    `stage` $stage `forward` custom<ChunkSymbols>($forward)
    `backward` custom<ChunkSymbols>($backward)
    `update` custom<ChunkSymbols>($update)
    `actions` $actions (`stash_slots` $stash_slots^)? attr-dict
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// `actions`, typed.
    auto getActionList() { return getActions().getAsRange<ActionAttr>(); }
    /// The module's pipe.microbatches (1 if absent).
    int64_t getNumMicrobatches();
    /// `stash_slots`, or M when absent.
    int64_t getNumStashSlots();
    /// The model chunks this stage holds (the length of `forward`).
    int64_t getNumChunks() { return getForward().size(); }
    /// Chunk `chunk`'s function of `phase` (forward, backward or update;
    /// the weight phase has none), as named here.
    ::mlir::FlatSymbolRefAttr getFunction(Phase phase, int64_t chunk);
    /// That function itself, or null when it does not exist.
    ::mlir::func::FuncOp lookupFunction(Phase phase, int64_t chunk);
    /// The functions action `a` runs, as named here: the update every
    /// chunk's update, the last chunk first; a forward or backward its
    /// chunk's; a weight or flush action none.
    ::llvm::SmallVector<::mlir::FlatSymbolRefAttr>
    getActionFunctions(ActionAttr a);
    /// Each chunk's forward, backward and update functions; when one does
    /// not exist, a located error "stage S lacks its PHASE function @f"
    /// (then `hint`) and failure.
    ::mlir::FailureOr<
        ::llvm::SmallVector<std::array<::mlir::func::FuncOp, 3>>>
    lookupChunkFunctions(::llvm::StringRef hint = "");
    /// The most micro-batches of one chunk whose forward has run and
    /// backward not, at any point of `actions`.
    static int64_t maxInFlight(::llvm::ArrayRef<ActionAttr> actions);
  }];
}

#endif // GPIPE_PIPE_OPS
