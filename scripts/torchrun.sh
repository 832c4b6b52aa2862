#!/usr/bin/env bash
# Run train.py under torchrun on this node; for several nodes, run it on every node.
#
#   One node, 8 GPUs:   scripts/torchrun.sh experiment=ijepa data.root=/data/imagenet run_name=h14
#   Two CPU processes:  NPROC_PER_NODE=2 scripts/torchrun.sh trainer.accelerator=cpu run_name=cpu2
#   Two nodes:          on each node, with NODE_RANK=0 on the first and NODE_RANK=1 on the other:
#     NNODES=2 NODE_RANK=0 MASTER_ADDR=node0.cluster MASTER_PORT=29500 scripts/torchrun.sh ... run_name=h14
#
# Environment (defaults in brackets):
#   NNODES [1]          number of nodes
#   NODE_RANK [0]       this node's index, 0..NNODES-1
#   NPROC_PER_NODE      processes (GPUs) on this node [every visible GPU, else 1]
#   MASTER_ADDR         host name or IP of node 0, reachable from every node [127.0.0.1]
#   MASTER_PORT         a free TCP port on node 0 [29500]
#   MAX_RESTARTS [0]    torchrun restarts all ranks this often when one fails
#                       (add resume=true so the restarted ranks continue from the newest
#                       checkpoint; see "Crashes and resume" in the README)
#   RDZV_ID [trainlab]  names the job at the rendezvous; differ it for jobs sharing a host:port
# Restarts need a fresh store for every attempt: torchrun's "static" rendezvous, and c10d's
# shared store (its default), hand restarted workers the previous attempt's keys, and the
# process group then fails to connect ("Gloo connectFullMesh failed ... Connection
# refused") or waits forever. So: the c10d rendezvous with store sharing off, where rank 0
# starts a new store on a free port every round.
# run_name is required: every rank on every node must write to the same run dir, and a
# time-stamped default would differ between nodes.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ " $* " != *" run_name="* ]]; then
  echo "error: pass run_name=<name> so that every rank and node uses the same run dir" >&2
  exit 2
fi
gpus=$(nvidia-smi -L 2>/dev/null | wc -l || true)
NPROC_PER_NODE=${NPROC_PER_NODE:-$(( gpus > 0 ? gpus : 1 ))}
NNODES=${NNODES:-1}
PYTHON=${PYTHON:-$( [[ -x .venv/bin/python ]] && echo .venv/bin/python || echo python )}

export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1
exec "$PYTHON" -m torch.distributed.run \
  --nnodes="$NNODES" \
  --node-rank="${NODE_RANK:-0}" \
  --nproc-per-node="$NPROC_PER_NODE" \
  --rdzv-backend=c10d \
  --rdzv-endpoint="${MASTER_ADDR:-127.0.0.1}:${MASTER_PORT:-29500}" \
  --rdzv-id="${RDZV_ID:-trainlab}" \
  --max-restarts="${MAX_RESTARTS:-0}" \
  train.py trainer.devices="$NPROC_PER_NODE" trainer.num_nodes="$NNODES" "$@"
