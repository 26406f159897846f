// The thread that writes a stopped scan's report streams while Python builds
// its part of crawl_module's report (Note [Reports prepared on a second
// thread] in bindings.cc).
#pragma once

#include <functional>

namespace torchscan {

// Runs `task` on the process's stream-writing thread, after the tasks posted
// before it. The thread starts when first needed and is kept; a forked child
// starts its own (threads do not survive a fork).
void RunOnStreamWriter(std::function<void()> task);

}  // namespace torchscan
