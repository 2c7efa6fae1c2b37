"""A local Hugging Face cache laid out as `hf download` leaves it, for the tests: under
HOME/hub/models--Org--Name, blobs/ holding the files (links to a synthetic model's), snapshots/COMMIT/
linking into blobs/, and refs/main naming COMMIT."""
import os

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def add_model(home, repo_id, src, replace=None):
    """Puts the model directory src into the cache at home as repo_id; returns its snapshot.
    replace: {file name: text} written as blobs of their own instead of src's files."""
    repo = os.path.join(home, "hub", "models--" + repo_id.replace("/", "--"))
    snap = os.path.join(repo, "snapshots", COMMIT)
    os.makedirs(os.path.join(repo, "blobs"))
    os.makedirs(snap)
    os.makedirs(os.path.join(repo, "refs"))
    replace = replace or {}
    for i, name in enumerate(sorted(set(os.listdir(src)) | set(replace))):
        blob = os.path.join(repo, "blobs", "%040x" % i)
        if name in replace:
            with open(blob, "w") as f:
                f.write(replace[name])
        else:
            os.symlink(os.path.join(src, name), blob)
        os.symlink(os.path.relpath(blob, snap), os.path.join(snap, name))
    with open(os.path.join(repo, "refs", "main"), "w") as f:
        f.write(COMMIT)
    return snap
