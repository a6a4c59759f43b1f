"""The session of docs/commands/export-mender.md, export-mender-module.md and docs/fleet.md's
"Mender" section: an artifact written and validated with Debian's mender-artifact, and the
update module driven through Mender's states as the client drives it, the client's file tree
unpacked from the artifact with tar, against the embedded local device (``device/``: its
``.edge`` is the work dir, so ``edge releases`` shows what the module did)."""

from __future__ import annotations

from .fleet import BLOCKS as _F  # docs/fleet.md's console blocks before the Mender section
from .models import DOCS_DIR
from .steps import Session, Step, keep, on_page

_PAGE, _MODULE, _FLEET = ("docs/commands/export-mender.md",
                          "docs/commands/export-mender-module.md", "docs/fleet.md")
_EXPORT = "edge export mender digits-rpi4.bundle --device-type raspberrypi4"
_DEVICE = '--work-dir "$EDGE_LOCAL_DEVICE/.edge"'
_fleet, _module = on_page(_FLEET), on_page(_MODULE)


def _tree(artifact: str, tree: str) -> str:
    """What the Mender client lays out for the module: meta-data and the payload's files."""
    return (f"mkdir -p {tree}/header {tree}/files {tree}/tmp && tar -xOf {artifact} "
            f"header.tar.gz | tar -xzO headers/0000/meta-data > {tree}/header/meta-data && "
            f"tar -xOf {artifact} data/0000.tar.gz | tar -xz -C {tree}/files")


_READ = keep(lambda _, line: line.strip().startswith(
    ("Name:", "Version:", "Compatible", "Type:", '"edge_', "name:")))

SESSION = Session(name="mender", docs=(_PAGE, _MODULE, _FLEET), workdir=DOCS_DIR / "mender",
                  files=lambda work: None, steps=[
    Step(command="edge optimize sample:digits --profile rpi4 -o digits-rpi4.bundle"),
    Step(command=f"{_EXPORT} -o release.mender", block=0),
    Step(command="mender-artifact validate release.mender", block=0),
    Step(command=f"{_EXPORT} --candidate original --artifact-name digits-original "
                 "-o original.mender --json", block=0),
    Step(command="edge export mender . --device-type raspberrypi4 -o r.mender", block=1),
    Step(command="edge export mender digits-rpi4.bundle --device-type 'raspberry pi' "
                 "-o r.mender", block=1),
    Step(command=f"{_EXPORT} -o out/r.mender", block=1),
    Step(command="ls", block=1),
    _module(command="edge export mender-module -o edge-release", block=0),
    _module(command="ls -l edge-release | cut -d' ' -f1", block=0),
    _fleet(command=f"{_EXPORT} -o release.mender {_DEVICE}", block=_F + 0),
    _fleet(command="mender-artifact validate release.mender", block=_F + 0),
    _fleet(command="mender-artifact read release.mender", block=_F + 0, show=_READ),
    _fleet(command="edge export mender-module -o edge-release", block=_F + 0),
    _fleet(command=_tree("release.mender", "tree"), block=_F + 1),
    _fleet(command="./edge-release ArtifactInstall tree", block=_F + 1),
    _fleet(command="./edge-release NeedsArtifactReboot tree", block=_F + 1),
    _fleet(command="./edge-release SupportsRollback tree", block=_F + 1),
    _fleet(command="./edge-release ArtifactCommit tree", block=_F + 1),
    _fleet(command="./edge-release Cleanup tree", block=_F + 1),
    _fleet(command="edge releases", block=_F + 1),
    _fleet(command=f"{_EXPORT} --candidate original -o original.mender {_DEVICE}",
           block=_F + 2),
    _fleet(command=_tree("original.mender", "t2"), block=_F + 2),
    _fleet(command="./edge-release ArtifactInstall t2", block=_F + 2),
    _fleet(command="./edge-release ArtifactRollback t2", block=_F + 2),
    _fleet(command="./edge-release ArtifactFailure t2", block=_F + 2),
    _fleet(command="edge releases", block=_F + 2),
    _fleet(command="rm -rf t2 && " + _tree("original.mender", "t2"), block=_F + 3),
    _fleet(command="printf x >> t2/files/model.onnx", block=_F + 3),
    _fleet(command="./edge-release ArtifactInstall t2; echo \"exit $?\"", block=_F + 3),
    _fleet(command="./edge-release ArtifactRollback t2 && ./edge-release ArtifactFailure t2",
           block=_F + 3),
    _fleet(command="readlink device/.edge/current", block=_F + 3),
])
