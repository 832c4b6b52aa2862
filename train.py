"""Train: `python train.py [experiment=NAME] [key=value ...]`. The training path reads top to
bottom in src/trainlab/training.py; the command line is src/trainlab/commands.py."""

from trainlab.commands import train_command

if __name__ == "__main__":
    train_command()
