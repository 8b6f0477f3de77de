# torch-ds-ranks.py — one rank of tests/test-torch-deepspeed-dist.py:
# runs tests/torch-ds-train.py's run() for each case given, under
# DeepSpeed (its launcher's environment: RANK, WORLD_SIZE, MASTER_ADDR,
# MASTER_PORT; gloo on the cpu) or under mixprec.torch (mixprec-run), and
# prints each case's report as one RESULT line of JSON.
#
# usage: torch-ds-ranks.py deepspeed|mixprec TMPDIR MODE:STAGE...
import json
import logging
import os
import sys
import warnings

warnings.simplefilter("ignore")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("DS_ACCELERATOR", "cpu")

import torch  # noqa: E402

from torch_ds_common import load_script, open_cpu_deepspeed  # noqa: E402

torch.set_num_threads(1)
logging.getLogger("DeepSpeed").setLevel(logging.ERROR)
impl, tmpdir, cases = sys.argv[1], sys.argv[2], sys.argv[3:]
script = load_script(impl)
if impl == "deepspeed":
    open_cpu_deepspeed()
rank = int(os.environ.get("RANK", "0"))
for case in cases:
    mode, stage = case.split(":")
    where = os.path.join(tmpdir, "%s-%s-%s" % (impl, mode, stage))
    os.makedirs(where, exist_ok=True)
    report = script.run(mode, int(stage), where)
    print("RESULT " + json.dumps({"rank": rank, "case": case, "report": report}), flush=True)
