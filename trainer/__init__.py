"""torchdeck's training program: the same module runs under torchrun on a
laptop and in a pod on EKS, on CPU or GPU. Imports torch and numpy only
(torchvision and boto3 where present, never required) and knows nothing of
the console. Entry points: ``python -m torchdeck.trainer`` (train) and
``python -m torchdeck.trainer.evaluate`` (test a saved model)."""
