"""Mender: edge's update module, ``edge_release.py`` (standard library only, run on the
device by the Mender client as ``/usr/share/mender/modules/v3/edge-release``)."""

from pathlib import Path

__all__ = ["MODULE", "MODULE_PATH", "PAYLOAD_TYPE"]

#: The payload type of edge's artifacts: the update module's name.
PAYLOAD_TYPE = "edge-release"
#: The update module's source (package data: shipped in the wheel).
MODULE = Path(__file__).with_name("edge_release.py")
#: Where the Mender client looks for it on a device.
MODULE_PATH = f"/usr/share/mender/modules/v3/{PAYLOAD_TYPE}"
