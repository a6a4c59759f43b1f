"""edge works offline on the user's own machines: the frameworks it runs send no telemetry and
write nothing outside edge's cache and outputs.

``apply()`` runs first thing in every edge process (``edge.cli.main``) and before a framework
is imported. It sets environment variables, which every child edge starts (intake and
onnx2tf children, toolchain environments, a device agent on this host) inherits:

- ONNX Runtime's telemetry (a device id and an event database under
  ``~/.cache/Microsoft/DeveloperTools``, uploads) is turned off by its own switch,
  ``ORT_DISABLE_TELEMETRY``;
- Keras and matplotlib keep their configuration under edge's cache instead of ``~/.keras`` and
  ``~/.config/matplotlib``;
- other frameworks' telemetry switches are set, should a child import one.

OpenVINO's converters (``ov.convert_model``) and NNCF send usage data to Google Analytics and
keep a client id under ``~/intel`` unless their telemetry package, ``openvino_telemetry``,
cannot be imported; that package reads no switch of its own (only a consent file in ``$HOME``,
which edge must not write). Both fall back to their built-in no-op stub when the import fails,
so ``apply()`` makes it fail in this process.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from edge.core.cache import cache_root

__all__ = ["SWITCHES", "HOMES", "BLOCKED_MODULES", "environment", "apply"]

#: Telemetry switches, each its framework's own documented opt-out.
SWITCHES: Mapping[str, str] = {
    "ORT_DISABLE_TELEMETRY": "1",  # onnxruntime (1DS telemetry, ~/.cache/Microsoft)
    "HF_HUB_DISABLE_TELEMETRY": "1",  # huggingface_hub
    "DO_NOT_TRACK": "1",  # the cross-tool convention (consoledonottrack.com)
}

#: Folders a framework writes under ``$HOME`` unless told another: variable -> subfolder of
#: edge's cache.
HOMES: Mapping[str, str] = {
    "KERAS_HOME": "keras",  # keras and tf_keras: keras.json (and downloads)
    "MPLCONFIGDIR": "matplotlib",  # matplotlib: matplotlibrc, font cache
}

#: Telemetry packages edge's frameworks import only when present (their stub otherwise).
BLOCKED_MODULES = ("openvino_telemetry",)


def environment(cache: Path) -> dict[str, str]:
    """The variables ``apply()`` sets, with ``cache`` as edge's cache folder."""
    folders = {name: str(cache.absolute() / "frameworks" / sub) for name, sub in HOMES.items()}
    return {**SWITCHES, **folders}


def apply() -> None:
    """Turn third-party telemetry off and keep frameworks' files in edge's cache, for this
    process and every child it starts."""
    os.environ.update(environment(cache_root()))
    for name in BLOCKED_MODULES:
        if not isinstance(sys.modules.get(name), type(sys)):
            sys.modules[name] = None  # type: ignore[assignment]  # import raises ImportError
