from .plain import plain_schedule

__all__ = ["plain_schedule"]
