"""Schedules: plain (the baseline) and poly (isl-decided); knobs in config.ScheduleConfig."""
