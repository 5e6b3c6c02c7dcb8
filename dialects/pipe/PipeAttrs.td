// The pipe dialect's enums and attributes: phases and schedule actions.
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
      I32EnumAttrCase<"Update", 2, "update">]> {
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
    micro-batch `mb`, or the optimizer update (which has no micro-batch).
    `chunk` is the model chunk the action runs, for interleaved schedules
    (several chunks per stage); it is 0, and not printed, otherwise.

    ```mlir
    #pipe.action<forward, mb = 3>
    #pipe.action<backward, mb = 0>
    #pipe.action<update>
    ```

    Outside the IR (pipeline.json, --explain, diagnostics) an action is
    written `F3`, `B0`, `U` (`getShortName`).
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
    /// "F3", "B0", "U" (the chunk is not shown: pipe.schedule only accepts
    /// chunk 0).
    std::string getShortName() const;
  }];
}

def Pipe_ActionArrayAttr
    : TypedArrayAttrBase<Pipe_ActionAttr, "array of schedule actions">;

#endif // GPIPE_PIPE_ATTRS
