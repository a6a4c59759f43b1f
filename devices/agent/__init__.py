"""edge's on-device agent: a standalone program (standard library, plus numpy and one runtime
for measuring) run by the device's own python, 3.8 or newer. It verifies and installs
artifacts, health-checks a model, switches releases atomically, rolls back, prunes, and measures
models ON the device, printing one JSON document on stdout (``cli``).

It is shipped as ONE file, a zipapp built by ``devices.agentfile`` from the modules of this
package; edge imports the same modules on its host (``timing`` above all: host and device time
with one method). Nothing here imports edge, targets, partition or other devices modules, and
only Python 3.8 syntax and library are used. The runtimes are not listed here: each runtime's
folder (``targets/<name>/agent.py``) holds its loader, zipped beside these modules as
``runtime_<name>.py`` and found by ``runtimes`` (on edge's host, through the ``edge.targets``
entry points).
"""
