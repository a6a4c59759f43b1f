"""A real TFLite external delegate that takes no operator, built here with the C compiler: the
model runs on LiteRT's CPU kernels with the delegate applied (what an NPU's delegate that claims
nothing looks like). Shared by tests/targets/test_tflite_delegate.py and bench/observed.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

__all__ = ["NULL_DELEGATE", "build_null_delegate", "compiler"]

#: A real TFLite external delegate in the shape of TFLite's sample "dummy external delegate":
#: the two entry points load_delegate() calls, and a Prepare that takes no node (so the model
#: runs on the CPU kernels, with the delegate applied). The struct is TfLiteDelegate's layout.
NULL_DELEGATE = r"""
#include <stdint.h>
#include <stdlib.h>
typedef struct TfLiteDelegate {
  void* data_;
  int (*Prepare)(void* context, struct TfLiteDelegate* delegate);
  int (*CopyFromBufferHandle)(void*, struct TfLiteDelegate*, int, void*);
  int (*CopyToBufferHandle)(void*, struct TfLiteDelegate*, int, void*);
  void (*FreeBufferHandle)(void*, struct TfLiteDelegate*, int*);
  int64_t flags;
  void* opaque_delegate_builder;
} TfLiteDelegate;
static int prepare(void* context, TfLiteDelegate* delegate) { (void)context; (void)delegate;
  return 0; }
TfLiteDelegate* tflite_plugin_create_delegate(char** keys, char** values, size_t n,
                                              void (*report)(const char*)) {
  (void)keys; (void)values; (void)n; (void)report;
  TfLiteDelegate* d = calloc(1, sizeof(TfLiteDelegate));
  if (d) d->Prepare = prepare;
  return d;
}
void tflite_plugin_destroy_delegate(TfLiteDelegate* d) { free(d); }
"""


def compiler() -> str | None:
    """The C compiler on PATH (cc, else gcc), or None."""
    return shutil.which("cc") or shutil.which("gcc")


def build_null_delegate(folder: Path) -> Path:
    """``folder``/libnull_delegate.so, compiled from ``NULL_DELEGATE``."""
    found = compiler()
    if found is None:
        raise RuntimeError("no C compiler (cc or gcc) to build the null delegate")
    source, library = folder / "null_delegate.c", folder / "libnull_delegate.so"
    folder.mkdir(parents=True, exist_ok=True)
    source.write_text(NULL_DELEGATE)
    subprocess.run([found, "-shared", "-fPIC", "-O2", "-o", str(library), str(source)],
                   check=True, timeout=120)
    return library
