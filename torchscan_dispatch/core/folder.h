// What a streaming scan (ScanOptions::streaming) folds its calls through.
// The recorder hands its settled calls to a Folder and drops them; what the
// calls are worth is known only to the layers above (the session's views,
// session/streaming.h), so the core sees this interface alone.
#pragma once

#include <cstddef>

namespace torchscan {

class Recorder;

class Folder {
 public:
  virtual ~Folder() = default;
  // While true no fold starts (a snapshot is reading the logs at cuts it took).
  virtual bool paused() const = 0;
  // Folds every call `r` holds; called by the recorder when nothing is open,
  // before it drops them (Recorder::FoldSettled).
  virtual void Fold(const Recorder& r) = 0;
  // How many of the recorder's module scopes the folds have answered.
  virtual size_t folded_scopes() const = 0;
  // Recorder::aggregate_layers: the data flow starts afresh after a fold.
  virtual void ForgetFields() = 0;
};

}  // namespace torchscan
