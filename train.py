"""Train: `python train.py [experiment=NAME] [key=value ...]`. The code is in src/trainlab/train.py."""

from trainlab.train import main

if __name__ == "__main__":
    main()
