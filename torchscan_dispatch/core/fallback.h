#pragma once

#include <string_view>

#include "absl/status/status.h"

namespace at {
class Tensor;
}  // namespace at

namespace torchscan {

// Registers the boxed fallback on the mode key once per process. Fails, with
// a message saying so, when another library already holds a fallback there.
absl::Status EnsureFallbackInstalled();

// While paused (calls nest), this thread's calls run unrecorded by every scan
// with the dispatch state unchanged: torch.compile traces and compiles inside
// a scan, and neither is the workload. The state stays unchanged because
// Dynamo's guards compare it with the state the compiled code will run in.
void PauseThreadRecording();
void ResumeThreadRecording();  // no-op when not paused
bool ThreadRecordingPaused();
// PyTorch is about to raise its own control-flow exception through this
// thread's open calls (Recorder::ControlFlowStop), in every scan that sees
// them; `saved`: the tensor whose saving raises it, or nullptr if not known.
void NoteControlFlowStop(const at::Tensor* saved = nullptr);
// A Python dispatch mode answered this thread's innermost open call
// (operator `name`) from a cache (Recorder::AnsweredFromCache), in every
// scan that sees it.
void NoteAnsweredFromCache(std::string_view name);

}  // namespace torchscan
