"""The confidence levels of the loop's intervals, one per kind of measurement: the tuner and the
validator measure at them, and whoever shows an interval (the dashboards) labels it with the
level it was taken at, without importing the code that measures.

Each is a two-sided level: an interval at 0.99 misses the true figure one time in a hundred.
"""

from __future__ import annotations

# A search's screens of candidates against the default (tuner.tune.SEARCH_SETTINGS), and so
# each trial's interval.
SCREENED_LEVEL = 0.99
# A task's verification of its winner (tuner.tune.VERIFY_SETTINGS): the interval of its result,
# and of the store entry the tuner writes from it.
VERIFIED_LEVEL = 0.999
# The validator's re-measurement of a store entry (validator.validate.MEASURE_SETTINGS): its
# decisions' intervals, and those of the entries it keeps or re-keys.
VALIDATED_LEVEL = 0.99
# The flag analysis's percentile bootstrap over trials (tuner.analyze.CONFIDENCE).
FLAG_LEVEL = 0.95
