"""Evaluate a checkpoint: `python eval.py ckpt_path=PATH`. The code is in src/trainlab/eval.py."""

from trainlab.eval import main

if __name__ == "__main__":
    main()
