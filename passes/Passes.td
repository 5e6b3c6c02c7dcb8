// Every pass of gpipe-compile; flags are prefixed `gpipe-`.
#ifndef GPIPE_PASSES
#define GPIPE_PASSES

include "mlir/Pass/PassBase.td"

def FuseLayerNorm : Pass<"gpipe-fuse-layer-norm", "mlir::func::FuncOp"> {
  let summary = "Rewrites a decomposed layer normalization into nn.layer_norm";
  let description = [{
    Below opset 17 torch exports `nn.LayerNorm` decomposed: ReduceMean over
    the trailing axes, Sub, Pow 2, ReduceMean, Add epsilon, Sqrt, Div, then
    Mul by the weight and Add of the bias when it has them. This pass
    replaces that exact pattern, as the importer writes it
    (`nn.div(nn.reduce_to(..), count)` for each mean), by one
    `nn.layer_norm` over the same axes with the same epsilon, scale and
    bias (a constant scale of ones without a weight), so that its fused
    kernels and gradients are used. It matches only when every value
    computed inside the pattern is read only inside it, both means reduce
    the same trailing axes (kept as 1s) and divide by their count, the
    exponent is a constant 2, epsilon a constant scalar, and the weight and
    bias have the normalized shape; anything else is left as it is. The
    fused op is located at the first mean's node. Runs first in
    `gpipe-pipeline`, before micro-batching and autodiff.
  }];
}

def FuseAttention : Pass<"gpipe-fuse-attention", "mlir::func::FuncOp"> {
  let summary = "Rewrites a decomposed scaled dot-product attention into "
                "nn.attention";
  let description = [{
    Replaces `softmax(where(mask, -inf, (q @ k^T) / c), -1) @ v` (or
    `* c`; the scale and the mask are each optional), as the importer writes
    torch's hand-written causal attention (`nn.batch_matmul` of q and k with
    transB, or of q and k^T without it, k then transposed back: composed
    with the `nn.transpose` that made k^T when there is one; `nn.div` or
    `nn.mul` by a splat constant, `nn.where` with a splat -inf,
    `nn.softmax` along the last axis, `nn.batch_matmul`), or torch's
    nn.MultiheadAttention (q scaled before the product, an additive constant
    mask of 0s and -infs, which becomes a 0/1 one), by one
    `nn.attention` with `scale = 1/c` (or `c`), whose kernels keep each
    score tile in cache and whose gradient recomputes the probabilities
    from the saved log-sum-exp. It matches only when every value computed
    inside the pattern is read only inside it, q, k and v have the same
    leading axes, and the mask has the shape [1.., Tq, Tk] and is computed
    from constants and parameters alone (no batch); it becomes a [Tq, Tk]
    operand. Anything else (another softmax axis, a scale that is not a
    splat constant, a dropout on the probabilities, a padding mask, an
    additive bias with finite entries) is left as it is. The fused op is
    located at the Q K^T product's node.
    Runs after `gpipe-fuse-layer-norm`, before micro-batching and autodiff.
  }];
}

def Autodiff : Pass<"gpipe-autodiff", "mlir::func::FuncOp"> {
  let summary = "Differentiates the loss with respect to every parameter";
  let description = [{
    The function's result marked `nn.loss` (a `tensor<f32>` scalar) is
    differentiated in reverse mode, using each op's
    `DifferentiableOpInterface` rule. Gradients of a value used several times
    are summed. For every `nn.param` that influences the loss, an
    `nn.param_grad` is emitted before the return; parameters that do not
    influence the loss get none (as torch leaves their `.grad` unset).
    In a partitioned graph (ops carry `pipe.stage`, from `gpipe-partition`),
    each gradient op gets the stage of the forward op it differentiates and
    the unit attribute `nn.backward`; each `nn.param_grad` gets its
    parameter's stage.
  }];
  let dependentDialects = ["gpipe::nn::NNDialect",
                           "gpipe::pipeline::PipeDialect"];
}

def Optimizer : Pass<"gpipe-optimizer", "mlir::func::FuncOp"> {
  let summary = "Turns parameter gradients into in-place optimizer updates";
  let description = [{
    Replaces every `nn.param_grad` by a `pipe.sgd_update` or
    `pipe.adam_update` placed just before the return, so every use of the
    parameter precedes its update. Hyper-parameters follow torch.optim. An
    update keeps its parameter's `pipe.stage`.
  }];
  let options = [
    Option<"optimizer", "optimizer", "std::string", "\"sgd\"",
           "sgd, adam or adamw">,
    Option<"lr", "lr", "double", "0.01", "learning rate">,
    Option<"momentum", "momentum", "double", "0.0", "SGD momentum">,
    Option<"nesterov", "nesterov", "bool", "false", "SGD Nesterov momentum">,
    Option<"weightDecay", "weight-decay", "double", "0.0",
           "weight decay (L2 for sgd/adam, decoupled for adamw)">,
    Option<"beta1", "beta1", "double", "0.9", "Adam beta1">,
    Option<"beta2", "beta2", "double", "0.999", "Adam beta2">,
    Option<"eps", "eps", "double", "1e-8", "Adam epsilon">,
  ];
  let dependentDialects = ["gpipe::pipeline::PipeDialect"];
}

def Microbatch : Pass<"gpipe-microbatch", "mlir::func::FuncOp"> {
  let summary = "Splits the mini-batch of a forward graph into micro-batches";
  let description = [{
    Runs on the forward graph (before `gpipe-autodiff`). Every value that
    carries the batch dimension of the graph inputs (found by following it
    through each op: broadcasting, GEMM rows, transposes, reshapes that keep
    the batch outermost, concat and slice along other axes) gets that
    dimension divided by `microbatches`, reshape targets included. The
    softmax cross-entropy loss gets `microbatches = M`: each micro-batch's loss
    becomes its share of the mini-batch mean (divided by the mini-batch's
    count of non-ignored labels), so the summed loss and the accumulated
    gradients are those of the whole mini-batch. The function gets
    `pipe.microbatches` and `pipe.batch_size`. Errors name the op when the
    batch cannot be split (B not divisible by M, a reduction or concat over
    the batch axis, a reshape that moves it).

    Batch normalization (`nn.batch_norm`) normalizes each micro-batch with
    its own statistics (GPipe's semantics, equal to torch calling the module
    once per micro-batch); its `nn.update_running_stats` gets the
    micro-batch's element count per channel. With `batchnorm=deferred` the
    running statistics are instead updated once per step from the whole
    mini-batch's (`microbatches = M` on the update, torchgpipe's
    DeferredBatchNorm).
  }];
  let options = [
    Option<"microbatches", "microbatches", "int64_t", "1",
           "number of micro-batches M (the batch size must be divisible by M)">,
    Option<"batchnorm", "batchnorm", "std::string", "\"microbatch\"",
           "running statistics of batch normalization: microbatch (updated "
           "by every micro-batch) or deferred (once per step, from the "
           "whole mini-batch)">,
  ];
  let dependentDialects = ["gpipe::nn::NNDialect",
                           "gpipe::pipeline::PipeDialect"];
}

def Partition : Pass<"gpipe-partition", "mlir::func::FuncOp"> {
  let summary = "Assigns every forward op to one of K pipeline stages";
  let description = [{
    Runs on the forward graph (before `gpipe-autodiff`, which puts each
    gradient op on its forward op's stage; `gpipe-optimizer` puts each update
    on its parameter's stage). Compute ops, in program (topological) order,
    are cut into `stages` contiguous groups that minimise the largest group's
    estimated cost: per op, t = max(FLOPs / 100 GFLOP/s, bytes / 20 GB/s)
    from the op's cost interface for the forward, plus t for each operand
    that needs a gradient (depends on a parameter) for the backward.
    Reshapes compute nothing and stay with the op before them, as does an
    `nn.update_running_stats` with its batch normalization. The loss is on
    the last stage. A view of a graph input goes with its first user. Each
    op gets `pipe.stage`; parameters get the stage of their first user.

    `cuts` (a list of ONNX node names, or module paths such as `fc2` or
    `blocks.3`, which name the first node under `/fc2/` or `/blocks.3/`)
    gives the split points by hand instead: piece i+1 starts with the
    compute op of cuts[i] (its unit: a node's views ride with it). There
    must be `stages - 1` of them, each naming an op that computes something,
    in program order; each is checked with an error naming it.

    `memory-per-stage` (bytes) keeps only the cuts whose every stage's
    estimated memory fits: its parameters (each counted on the first stage
    using it) with their gradient and `optimizer-states` state tensors, plus
    its stash times the stage's `in-flight` micro-batches; the stash is the
    values the stage reads from before it (with `remat` stage), and also
    every value its ops compute (with none). An estimate, before autodiff:
    gpipe-compile checks the planned arenas against the budget afterwards.
    When no cut fits, an error names the budget and the smallest estimate.

    `costs` (a cost table: `gpipe-run --profile FILE` of a `gpipe-compile
    --profile` build) replaces the analytic model: each op costs what its
    node took per step in the table (forward, backward, weight gradient,
    and the update of the parameters it uses first), found by node name
    when the table's forward signature for that name is the op's, else the
    mean of the table's nodes of the op's signature, else the analytic
    estimate times M times the table's measured-over-analytic ratio (a
    backward's recomputation is in the table when it was profiled with the
    same remat mode). A table that cannot be read is an error naming the
    file and line.
  }];
  let options = [
    Option<"stages", "stages", "int64_t", "1", "number of pipeline stages K">,
    ListOption<"cuts", "cuts", "std::string",
               "split points by hand: the node (or module path) each stage "
               "after the first starts with">,
    Option<"memoryPerStage", "memory-per-stage", "int64_t", "0",
           "bytes each stage's estimated memory must fit (0: no limit)">,
    ListOption<"inFlight", "in-flight", "int64_t",
               "micro-batches each stage keeps in flight under the schedule "
               "(default: all M)">,
    Option<"optimizerStates", "optimizer-states", "int64_t", "0",
           "optimizer state tensors per parameter (SGD momentum 1, Adam 2)">,
    Option<"remat", "remat", "std::string", "\"stage\"",
           "stage or none: what the stash estimate keeps">,
    Option<"costs", "costs", "std::string", "\"\"",
           "a measured cost table (JSON lines) the cuts balance instead of "
           "the analytic model">,
  ];
  let dependentDialects = ["gpipe::pipeline::PipeDialect"];
}

def OutlineStages : Pass<"gpipe-outline-stages", "mlir::ModuleOp"> {
  let summary = "Splits the partitioned training step into per-stage functions";
  let description = [{
    Turns the single training-step function, whose ops carry `pipe.stage`
    (and `nn.backward` for gradient ops), into three functions per stage:
    `@stage<S>_forward` (arguments: the graph inputs the stage reads;
    results: the values its backward needs), `@stage<S>_backward` (arguments:
    those values) and `@stage<S>_update`. Every value used on another stage
    becomes a `pipe.send` right after its definition and a `pipe.recv` before
    its first use, forward for activations and graph inputs, backward for
    gradients; a value may skip stages. A graph input is read by the first
    stage that uses it. Gradients of parameters go through
    `pipe.accumulate_grad` / `pipe.accumulated_grad`; the loss through
    `pipe.report_loss`. Parameters and constants are re-declared in each
    function that uses them.
  }];
  let dependentDialects = ["gpipe::pipeline::PipeDialect", "mlir::func::FuncDialect"];
}

def Remat : Pass<"gpipe-remat", "mlir::ModuleOp"> {
  let summary = "Recomputes each stage's forward inside its backward";
  let description = [{
    With `mode=stage` (GPipe's rematerialization), each stage's forward
    function keeps (returns) only its boundary inputs, the graph inputs it
    reads and the tensors it receives, and its backward function recomputes
    the forward values it needs from them in a `pipe.remat` region. Memory
    per in-flight micro-batch drops to the boundary inputs, at the cost of a
    second forward. `mode=none` leaves the IR unchanged. `stages` (with
    `mode=stage`) names the pieces (virtual stages, `pipe.stage` of the
    outlined functions) to rematerialize; the others keep every value their
    backward needs. Empty: all of them. A piece out of range is an error.

    `mode=segments` (what `gpipe-compile --remat auto --memory-per-stage`
    plans) takes `stash-bytes`, one entry per piece: the bytes per
    micro-batch its stash may hold (-1: no limit, the piece keeps every
    value). A piece whose stash is larger keeps some of its stash values and
    recomputes the others in the backward, from its boundary inputs and the
    kept values: starting from keeping everything, it stops keeping, one at a
    time, the value whose recomputation saves the most bytes per second of
    added forward work (the analytic cost model), until the stash fits.
    When nothing fits, the piece recomputes its whole forward, as
    `mode=stage`. Kept values and the recomputation's inputs become the new
    stash; the `pipe.remat` region yields the old one.
  }];
  let options = [
    Option<"mode", "mode", "std::string", "\"stage\"",
           "stage, segments or none">,
    ListOption<"stages", "stages", "int64_t",
               "the pieces to rematerialize (default: all)">,
    ListOption<"stashBytes", "stash-bytes", "int64_t",
               "mode=segments: per piece, the stash bytes per micro-batch it "
               "may keep (-1: all)">,
    Option<"costs", "costs", "std::string", "\"\"",
           "mode=segments: a measured cost table (gpipe-run --profile); "
           "recomputation is ranked by the table's forward seconds of each "
           "op instead of the analytic model's">,
  ];
  let dependentDialects = ["gpipe::pipeline::PipeDialect"];
}

def InlineRemat : Pass<"gpipe-inline-remat", "mlir::func::FuncOp"> {
  let summary = "Replaces each pipe.remat region by its ops (lowering)";
  let description = [{
    The first step below the pipeline IR, before code generation: the
    recomputation a `pipe.remat` region describes becomes ordinary ops of the
    backward function, in place of the region, its block arguments replaced
    by the region's inputs and its results by what `pipe.yield` returns. The
    code generator accepts no `pipe.remat`. Part of `gpipe-lower`.
  }];
}

def AccumulateInPlace : Pass<"gpipe-accumulate-in-place", "mlir::func::FuncOp"> {
  let summary = "Lets a GEMM add its gradient straight into the accumulator";
  let description = [{
    Lowering. Marks `in_place` every `pipe.accumulate_grad` whose gradient is
    an `nn.gemm` without C read by nothing else: the GEMM will add its
    product into the parameter's accumulator (beta 1), so the gradient never
    has a buffer of its own. With one micro-batch per step
    (`pipe.microbatches` = 1 on the module, or absent) a parameter whose only
    contribution in the function is such a GEMM is also marked `overwrite`:
    the GEMM writes the accumulator (beta 0), which then needs no clearing.
    Part of `gpipe-lower`.
  }];
}

def SplitWeightGrad : Pass<"gpipe-split-weight-grad", "mlir::func::FuncOp"> {
  let summary = "Defers weight-gradient GEMMs to the update, over all micro-batches";
  let description = [{
    Lowering, after gpipe-accumulate-in-place. With M > 1 micro-batches
    (`pipe.microbatches` on the module), marks `deferred` every in-place
    `pipe.accumulate_grad` whose GEMM is a weight gradient `A^T B` (transA,
    no transB, alpha 1, f32): each micro-batch's backward then only keeps the
    GEMM's two operands, and the update computes the gradient once, as one
    GEMM over all M micro-batches (M times the rows: better use of the
    GEMM). Zero-bubble schedules will schedule this as its own action. Part
    of `gpipe-lower`.
  }];
}

def FuseElementwise : Pass<"gpipe-fuse-elementwise", "mlir::func::FuncOp"> {
  let summary = "Groups chains of elementwise ops into one loop or kernel";
  let description = [{
    Lowering. Gives every op of a fusion group the same `pipe.fused = N`
    (i64, numbered per function); code generation then emits each group as
    one loop (CPU) or one generated kernel (CUDA), keeping the values read
    only inside it in registers. A group is a run of elementwise ops
    (`NN_Fusible`) with the same result shape, in program order; parameters
    and constants between them do not break it, any other op does. With
    `target=cuda`, an `nn.relu` that is the only reader of the `nn.gemm`
    just before it joins that GEMM (cuBLASLt's relu epilogue). Ops alone in
    their group get no mark. Part of `gpipe-lower`.
  }];
  let options = [
    Option<"target", "target", "std::string", "\"cpu\"", "cpu or cuda">,
  ];
}

def Bf16Shadows : Pass<"gpipe-bf16-shadows", "mlir::ModuleOp"> {
  let summary = "Keeps a bf16 copy of every parameter a GEMM reads";
  let description = [{
    Lowering, for `precision=bf16` (part of `gpipe-lower` then). A bf16 GEMM
    rounds its fp32 operands to bf16; a parameter's rounding is done once per
    update instead of once per GEMM: every `nn.param` of a stage whose
    parameter an `nn.gemm` of that stage reads as A or B (directly or
    through `nn.reshape`) is marked `pipe.bf16_shadow`, in all three of the
    stage's functions. The update then keeps the copy current after changing
    the fp32 master weights, the stage's `init` makes it from the loaded
    weights, and the GEMMs read it. `gpipe-plan-memory` gives each copy its
    place (`pipe.shadow`).
  }];
}

def PlanMemory : Pass<"gpipe-plan-memory", "mlir::ModuleOp"> {
  let summary = "Lays out each stage's arena and puts every value in it";
  let description = [{
    Lowering, after the other lowering passes (it reads their marks). For
    each stage (its three functions and its `pipe.schedule`), in this
    order, aligned to 64 bytes (`target=cpu`) or 256 (`target=cuda`):
    parameters (by first appearance), optimizer state, gradient
    accumulators (first those an `overwrite` GEMM writes, then those the
    update clears), the operands of deferred weight-gradient GEMMs (all
    micro-batches), with `target=cuda` the constants, with `pipe.bf16_shadow`
    the bf16 copies; then `stash_slots` stash slots (the schedule's count),
    each holding the forward's results (by storage root); then the
    temporaries. Each function's temporaries are planned on their own (the
    actions run one at a time), in code-generation units (a fusion group is
    one unit; its internal values get no buffer): a value gets the first
    free slot that fits when its unit runs and gives it back after its last
    reader's unit (first fit; results never share bytes with the operands of
    their own unit). Views (`nn.reshape`) get no buffer: they read their
    input's. CPU constants get none: they are arrays in the program.

    Writes `pipe.buffer` on every other value (its defining op, or its
    function argument), `pipe.accumulator` and `pipe.deferred_operands` on
    `pipe.accumulate_grad`, `pipe.state` on optimizer updates, `pipe.shadow`
    on marked `nn.param`s, and the stage's layout as `pipe.memory` on its
    `pipe.schedule` (what `pipeline.json`'s memory report and the runtime's
    one allocation use). `precision=bf16` also sizes the runtime's bf16
    operand scratch. Code generation prints these offsets; it plans
    nothing.
  }];
  let options = [
    Option<"target", "target", "std::string", "\"cpu\"", "cpu or cuda">,
    Option<"precision", "precision", "std::string", "\"fp32\"",
           "fp32 or bf16">,
    Option<"shardOptimizer", "shard-optimizer", "int64_t", "1",
           "D > 1 (ZeRO-1): no per-parameter optimizer state; after the "
           "gradient accumulators, one region per state slot of a 1/D share "
           "of them (pipe.state on the pipe.schedule)">,
  ];
  let dependentDialects = ["gpipe::pipeline::PipeDialect"];
}

def CheckMemory : Pass<"gpipe-check-memory", "mlir::ModuleOp"> {
  let summary = "Checks each stage's memory plan against its IR and schedule";
  let description = [{
    Checks the plan, not trusting it (part of `gpipe-lower`, after
    `gpipe-plan-memory`); every failure is an error located at the op or
    schedule concerned. For each stage: it has a `pipe.memory`; every value
    code generation stores has a buffer, aligned, inside its part of the
    arena; each long-lived object (a parameter, its bf16 copy, its
    accumulator, an update's state, a deferred GEMM's operands, a CUDA
    constant) has one buffer in all three functions and shares no byte with
    another; an in-place GEMM writes its accumulator; the forward's stashed
    results and the backward's arguments agree and fit a slot; no two
    temporaries of a function that are alive at the same time share a byte;
    and, reading the schedule's action list, no forward overwrites a stash
    slot whose micro-batch's backward has not run yet (micro-batch m uses
    slot m mod stash_slots).
  }];
}

def Schedule : Pass<"gpipe-schedule", "mlir::ModuleOp"> {
  let summary = "Builds each stage's action list and checks it";
  let description = [{
    Adds a `pipe.schedule` per stage from the registered schedule generator
    named by `schedule` (passes/schedules/): `gpipe` (GPipe: the forward of
    micro-batches 0..M-1, then their backward in reverse order, then the
    update), `1f1b` (PipeDream-flush: K-1-s warm-up forwards on stage s,
    then one forward and one backward in turn, then the cool-down
    backwards, then the update) or `zbh1` (ZB-H1: 1F1B's stash bound, each
    backward split into B and a W action, the micro-batch's weight-gradient
    GEMMs, placed where the stage would wait), `interleaved`
    (interleaved 1F1B with `virtual-stages` V >= 2 chunks per stage) or
    `zbv` (ZB-V: V = 2 chunks per stage in a V, B and W split as zbh1) or
    `bfpp` (breadth-first: interleaved's placement, GPipe's order chunk by
    chunk).

    The module's `pipe.stages` pieces (gpipe-partition's, outlined by
    gpipe-outline-stages) are the virtual stages; the schedule places them
    on K = pipe.stages / V stages (executables): with V = 1 piece s is stage
    s; interleaved puts pieces s, s+K, ..., s+(V-1)K on stage s as its chunks
    0..V-1 (bfpp likewise), zbv pieces s and 2K-1-s. Each stage's `pipe.schedule` names its
    chunks' functions.
    Each schedule's `stash_slots` is the most micro-batches it keeps in
    flight in one chunk (GPipe: M; 1F1B and ZB-H1: min(K-s, M)). Sets the
    module's `pipe.sends` to what the schedule needs of the runtime
    (`blocking` for GPipe; `buffered` for the others, whose stage s sends
    micro-batch i+1's activation while stage s+1 sends micro-batch i's
    gradient). The schedule's requirements on K, M and V are checked with
    an error naming them. Then runs the checks of `gpipe-check-schedule`.
  }];
  let options = [
    Option<"schedule", "schedule", "std::string", "\"gpipe\"",
           "the registered schedule: gpipe, 1f1b, zbh1, interleaved, zbv or "
           "bfpp">,
    Option<"virtualStages", "virtual-stages", "int64_t", "1",
           "model chunks per stage V (pipe.stages must be a multiple)">,
  ];
  let dependentDialects = ["gpipe::pipeline::PipeDialect"];
}

def FlushSends : Pass<"gpipe-flush-sends", "mlir::ModuleOp"> {
  let summary = "Places flush actions (wait for the stage's sends) before "
                "runs of W actions";
  let description = [{
    With buffered sends (`pipe.sends = "buffered"`), a send returns at once
    and the CPU runtime's MPI moves a large message on only while the sender
    is inside an MPI call. A run of W actions (deferred weight-gradient
    GEMMs) makes none, so a gradient sent by the backward just before it
    waits for the whole run while its receiver waits for it (ZB-H1's last
    stage: the last micro-batch's gradient reached stage 0 5 ms late on a
    2-stage MLP). This pass puts a `flush` action (`#pipe.action<flush>`,
    `S` in pipeline.json) before each run of W actions that follows an
    action which sent something since the stage's previous flush: the
    runtime waits there until those messages are received.

    A flush must not deadlock: a stage that waits for its sends to be
    received while their receiver waits for one of its later messages never
    resumes. Each flush is kept only if the schedules with it still pass
    `gpipe-check-schedule` (whose buffered simulation completes a flush once
    every send its stage issued is received); otherwise it is left out. The
    runtime's update already waits for the step's sends, so no flush goes
    before `U`. With blocking sends (GPipe, the CUDA target) it does
    nothing: a send has completed when it returns.

    ```mlir
    // before: ... #pipe.action<backward, mb = 7>, #pipe.action<weight, mb = 0>, ...
    // after:  ... #pipe.action<backward, mb = 7>, #pipe.action<flush>,
    //             #pipe.action<weight, mb = 0>, ...
    ```
  }];
  let dependentDialects = ["gpipe::pipeline::PipeDialect"];
}

def CheckSchedule : Pass<"gpipe-check-schedule", "mlir::ModuleOp"> {
  let summary = "Checks that the stages' schedules match and cannot deadlock";
  let description = [{
    Checks that the stages' `pipe.schedule`s place every virtual stage
    (0..pipe.stages-1) exactly once. Expands each stage's `pipe.schedule`
    into its sequence of sends and receives (those of each action's
    function, in order, tagged with the action's micro-batch and chunk; a
    peer, a virtual stage, stands for the stage that holds it). Checks that
    every send has exactly one receive in
    the peer stage with the same tag, micro-batch and type (and the
    reverse), then simulates all stages under the module's `pipe.sends`
    semantics: `blocking` (the default; rendezvous: a send completes only
    together with its receive) or `buffered` (a send completes at once; a
    receive completes once its send was issued; a `flush` action completes
    once every send its stage issued was received). A schedule that cannot run
    to its end is reported as a deadlock, naming each blocked stage, action
    and transfer. (The stash slots are checked by `pipe.schedule`'s
    verifier.)
  }];
}

#endif // GPIPE_PASSES
