// The pipe dialect's enums and attributes: phases, schedule actions, and
// the memory plan.
#ifndef GPIPE_PIPE_ATTRS
#define GPIPE_PIPE_ATTRS

include "dialects/pipe/PipeDialect.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

// Plain C++ enums (no attribute of their own): a function's `pipe.phase` and
// the module's `pipe.sends` stay strings in the IR, verified against these.
def Pipe_Phase : I32EnumAttr<"Phase",
    "pipeline phase (which of its stage's functions an action runs)", [
      I32EnumAttrCase<"Forward", 0, "forward">,
      I32EnumAttrCase<"Backward", 1, "backward">,
      I32EnumAttrCase<"Update", 2, "update">,
      // An action only: the weight-gradient GEMMs of one micro-batch that
      // gpipe-split-weight-grad deferred out of its backward (zero-bubble
      // schedules' W). No function has this phase.
      I32EnumAttrCase<"Weight", 3, "weight">,
      // An action only, a transfer action: wait until every message the
      // stage has sent is received (buffered sends; gpipe-flush-sends
      // places it before a run of W actions, whose GEMMs make no MPI call
      // that would move those messages). No function has this phase.
      I32EnumAttrCase<"Flush", 4, "flush">]> {
  let cppNamespace = "::gpipe::pipeline";
  let genSpecializedAttr = 0;
}

def Pipe_Sends : I32EnumAttr<"Sends",
    "what a schedule needs of the runtime's sends", [
      // A send returns once its receive has taken the data (MPI_Send, one
      // in-order CUDA communication stream): the deadlock check simulates
      // rendezvous.
      I32EnumAttrCase<"Blocking", 0, "blocking">,
      // A send returns at once, its data copied (the CPU runtime's buffered
      // sends): only receives wait.
      I32EnumAttrCase<"Buffered", 1, "buffered">]> {
  let cppNamespace = "::gpipe::pipeline";
  let genSpecializedAttr = 0;
}

def Pipe_ActionAttr : AttrDef<Pipe_Dialect, "Action"> {
  let mnemonic = "action";
  let summary = "one action of a stage's schedule";
  let description = [{
    Runs the stage's function of `phase`: the forward or the backward of
    micro-batch `mb`, or the optimizer update (which has no micro-batch);
    `weight` runs micro-batch `mb`'s weight-gradient GEMMs, which
    gpipe-split-weight-grad moved out of its backward (a zero-bubble
    schedule's W: the backward is then only the input gradient, I).
    `chunk` is the model chunk the action runs, for interleaved schedules
    (several chunks per stage); it is 0, and not printed, otherwise.
    `flush` is a transfer action, with neither micro-batch nor chunk: the
    stage waits until the messages it has sent so far are received
    (gpipe-flush-sends places it; gpipe-check-schedule proves it cannot
    deadlock).

    ```mlir
    #pipe.action<forward, mb = 3>
    #pipe.action<backward, mb = 0>
    #pipe.action<weight, mb = 0>
    #pipe.action<update>
    #pipe.action<flush>
    ```

    Outside the IR (pipeline.json, --explain, diagnostics) an action is
    written `F3`, `B0`, `W0`, `U`, `S` (`getShortName`), with its chunk appended
    when not 0: `F3c1` is micro-batch 3's forward of chunk 1.
  }];
  let parameters = (ins EnumParameter<Pipe_Phase>:$phase,
                        OptionalParameter<"std::optional<int64_t>">:$microbatch,
                        DefaultValuedParameter<"int64_t", "0">:$chunk);
  // `<phase>`, then `mb = N` and `chunk = N` when present (custom: ODS's
  // format cannot parse the chunk without the micro-batch).
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let skipDefaultBuilders = 1;
  let builders = [
    AttrBuilder<(ins "Phase":$phase,
                     CArg<"std::optional<int64_t>", "std::nullopt">:$microbatch,
                     CArg<"int64_t", "0">:$chunk), [{
      return $_get($_ctxt, phase, microbatch, chunk);
    }]>
  ];
  let extraClassDeclaration = [{
    /// "F3", "B0", "W0", "U", "S" (flush); "F3c1" for chunk 1.
    std::string getShortName() const;
  }];
}

def Pipe_ActionArrayAttr
    : TypedArrayAttrBase<Pipe_ActionAttr, "array of schedule actions">;

// Memory planning (gpipe-plan-memory): where a value lives in its stage's
// arena.
def Pipe_BufferSpace : I32EnumAttr<"BufferSpace",
    "the part of a stage's memory a buffer's offset is relative to", [
      // The stage's arena (the runtime's one allocation per stage).
      I32EnumAttrCase<"Arena", 0, "arena">,
      // The current micro-batch's stash slot (what a forward keeps for its
      // backward); the slot's base is the memory plan's stash_base plus the
      // slot number times stash_slot.
      I32EnumAttrCase<"Stash", 1, "stash">]> {
  let cppNamespace = "::gpipe::pipeline";
  let genSpecializedAttr = 0;
}

def Pipe_BufferAttr : AttrDef<Pipe_Dialect, "Buffer"> {
  let mnemonic = "buffer";
  let summary = "bytes [offset, offset + bytes) of the arena or of a stash slot";
  let description = [{
    Where gpipe-plan-memory put a value (`pipe.buffer` on the op that defines
    it, or on a function argument), a parameter's bf16 copy (`pipe.shadow`),
    an accumulator (`pipe.accumulator`), optimizer state (`pipe.state`) or a
    deferred GEMM's operands (`pipe.deferred_operands`). `bytes` is the
    reserved size (the value's size rounded up to the plan's alignment).

    ```mlir
    #pipe.buffer<arena, offset = 4096, bytes = 1024>
    #pipe.buffer<stash, offset = 0, bytes = 256>
    ```
  }];
  let parameters = (ins EnumParameter<Pipe_BufferSpace>:$space,
                        "int64_t":$offset, "int64_t":$bytes);
  let assemblyFormat = "`<` $space `,` struct($offset, $bytes) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    int64_t getEnd() const { return getOffset() + getBytes(); }
    /// Whether the two buffers share a byte of the same space.
    bool overlaps(BufferAttr other) const {
      return getSpace() == other.getSpace() &&
             getOffset() < other.getEnd() && other.getOffset() < getEnd();
    }
  }];
}

def Pipe_MemoryPlanAttr : AttrDef<Pipe_Dialect, "MemoryPlan"> {
  let mnemonic = "memory_plan";
  let summary = "the layout of one stage's arena";
  let description = [{
    `pipe.memory` on a stage's `pipe.schedule`, from gpipe-plan-memory, for
    `target` ("cpu" or "cuda") and `precision` ("fp32" or "bf16"). Every
    offset is a multiple of `align`. The arena (`arena` bytes) is laid out as

        [0, stash_base)             long-lived: parameters, optimizer state,
                                    gradient accumulators (those in
                                    [cleared_begin, cleared_end) are zeroed
                                    after each update), deferred GEMM
                                    operands, (CUDA) constants, (bf16)
                                    parameter copies
        [stash_base, transient_base)  stash_slots slots of stash_slot bytes
        [transient_base, arena)     the temporaries of one action at a time
                                    (`transient` bytes: the largest action's)

    `parameters`, `optimizer`, `gradients`, `constants` and `shadows` are the
    long-lived part's sizes by kind (the manifest's memory report);
    `scratch` is the runtime's bf16 operand scratch, outside the arena.

    ```mlir
    #pipe.memory_plan<target = "cpu", precision = "fp32", align = 64,
      arena = 5248, parameters = 1024, optimizer = 0, gradients = 1024,
      constants = 0, shadows = 0, cleared_begin = 1024, cleared_end = 2048,
      stash_base = 2048, stash_slot = 512, stash_slots = 4,
      transient_base = 4096, transient = 1152, scratch = 0>
    ```
  }];
  let parameters = (ins StringRefParameter<"the target">:$target,
                        StringRefParameter<"the precision">:$precision,
                        "int64_t":$align, "int64_t":$arena,
                        "int64_t":$parameters, "int64_t":$optimizer,
                        "int64_t":$gradients, "int64_t":$constants,
                        "int64_t":$shadows, "int64_t":$cleared_begin,
                        "int64_t":$cleared_end, "int64_t":$stash_base,
                        "int64_t":$stash_slot, "int64_t":$stash_slots,
                        "int64_t":$transient_base, "int64_t":$transient,
                        "int64_t":$scratch);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

#endif // GPIPE_PIPE_ATTRS
