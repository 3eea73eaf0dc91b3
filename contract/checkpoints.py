"""The checkpoint layout contract: what a job writes under its checkpoint directory, and what the verifier reads.

A job writes each checkpoint into a directory of its own under ``GPUCLUSTER_CHECKPOINT_DIR``
(``/checkpoints/<jobset name>``), named for its step: the step is the directory name's last run of digits
(``step-1200``, torchtitan's ``step-1200``, Megatron's ``iter_0001200``, Hugging Face's ``checkpoint-1200``). The
formats, each recognised by the file that says the checkpoint is complete:

- **PyTorch Distributed Checkpoint** (``torch.distributed.checkpoint.save`` with its ``FileSystemWriter``): shard
  files (``__<rank>_<n>.distcp``) and ``.metadata``, written last, by rank 0, after every rank's shards. The metadata
  names, for every tensor chunk and byte blob, the file it lies in, its offset and its length: the verifier checks
  each file exists and is long enough. torchtitan, torchtune and nvidia-resiliency-ext's async checkpointing write
  this format.
- Others map by naming the file that commits the checkpoint and the files it lists: Megatron's ``torch_dist``
  format is DCP (its ``metadata.json`` beside ``.metadata``); Orbax writes ``_CHECKPOINT_METADATA`` after its
  ``commit_success`` file; a job of its own format writes the manifest below and nothing else is needed.

The **manifest** (optional, any format): ``gpucluster-manifest.json`` in the checkpoint's directory, written after
every file it names, ``{"step": <int>, "files": [{"path": <relative path>, "size": <bytes>, "sha256": <hex>}]}``.
With it the verifier also checks every named file's size and SHA-256; without it, DCP's own metadata is all there is
(sizes, no hashes).

**Where to resume**: a training pod finds its job's latest verified checkpoint in ``RESUME_FILE``
(``GPUCLUSTER_RESUME_FILE``), ``{"job", "step", "directory": "/checkpoints/<job>/step-<N>", "reported",
"checked"}``, kept by the verifier and mounted read-only from the team's ``checkpoint-resume`` ConfigMap; no file:
nothing of the job is verified yet (start afresh).
"""

from __future__ import annotations

import re

#: Where a training pod mounts its team's ``checkpoints`` claim; a job's checkpoints are under ``<this>/<jobset name>``
#: (its ``GPUCLUSTER_CHECKPOINT_DIR``), and the verifier's pod mounts the same claim, read-only, at the same place.
CHECKPOINTS_MOUNT = "/checkpoints"
#: Where a training pod reads the checkpoint to resume from (its ``GPUCLUSTER_RESUME_FILE``), and the directory it is
#: mounted in (read-only, the job's entry of the ``checkpoint-resume`` ConfigMap).
RESUME_DIR = "/run/gpucluster"
RESUME_FILE = f"{RESUME_DIR}/resume.json"


def job_directory(job: str) -> str:
    """The directory a job writes its checkpoints under (its ``GPUCLUSTER_CHECKPOINT_DIR``)."""
    return f"{CHECKPOINTS_MOUNT}/{job}"


#: DCP's metadata file, written last (``torch.distributed.checkpoint.filesystem``'s ``.metadata``).
DCP_METADATA = ".metadata"
#: DCP's shard files: ``__<rank>_<n>.distcp``.
DCP_SHARD_SUFFIX = ".distcp"
#: The optional manifest a job's save helper writes after every file it names.
MANIFEST = "gpucluster-manifest.json"
#: The largest metadata or manifest file the verifier reads (a 512-GPU job's DCP metadata is a few MB).
MAX_INDEX_BYTES = 256 * 1024 * 1024

_STEP = re.compile(r"(\d+)(?!.*\d)")


def step_of(directory: str) -> int | None:
    """The step a checkpoint directory's name says (its last run of digits); None when it names none."""
    found = _STEP.search(directory)
    return int(found.group(1)) if found else None
