from .partition import Decision, Group, Limits, Partition, partition

__all__ = ["Decision", "Group", "Limits", "Partition", "partition"]
