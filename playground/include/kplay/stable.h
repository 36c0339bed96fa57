// kplay's prelude for PyTorch's stable ABI: include it before any torch/csrc/stable or torch/headeronly
// header. kplay passes its folder with -I to every build (and hashes it into the build's identity);
// `kplay export` copies it beside the sources.
#pragma once

// Use only what torch 2.10 offers, so that the source builds on every torch kplay supports (2.10 and
// later): a newer API is a compile error here, not a missing symbol on an older torch. A source that
// needs a newer torch defines its own TORCH_TARGET_VERSION before including this.
#ifndef TORCH_TARGET_VERSION
#define TORCH_TARGET_VERSION (((0ULL + 2) << 56) | ((0ULL + 10) << 48))
#endif
