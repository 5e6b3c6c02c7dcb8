// The pipe dialect's enums: phases and send semantics.
#ifndef GPIPE_PIPE_ATTRS
#define GPIPE_PIPE_ATTRS

include "dialects/pipe/PipeDialect.td"
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

#endif // GPIPE_PIPE_ATTRS
