"""The tuning database: records of every trial, their key, and the device identity that keys them.

Data only, on the floor just above the facts: the runtime reads it to choose a
point, the tuner (septran.tuning) writes it. It imports nothing of either.
"""
from septran.records.db import TuningDB, best_of, default_db
from septran.records.device import device_identity, device_label, device_string
from septran.records.key import TuningKey
from septran.records.record import STATUSES, Timing, TuningRecord, point_id

__all__ = [
    "TuningDB", "TuningKey", "TuningRecord", "Timing", "STATUSES",
    "best_of", "default_db", "point_id", "device_identity", "device_label", "device_string",
]
