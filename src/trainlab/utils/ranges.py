"""The ranges a constructor's arguments take, written into its signature.

A class that a config instantiates says what each number may be where it names it
(``weight_decay: DecaySchedule``, ``depth: Count``); trainlab.checks.config validates every
``_target_`` node of the composed config against these signatures with pydantic before
anything is built, and names the key that breaks one. Plain ``annotated_types``: a new
class may write its own (``Annotated[float, Interval(ge=0, lt=1)]``) as well as use these.
"""

from typing import Annotated

from annotated_types import Ge, Gt, Interval

Count = Annotated[int, Ge(1)]  # at least one (blocks, heads, neighbours, images)
NonNegativeInt = Annotated[int, Ge(0)]
Positive = Annotated[float, Gt(0)]
NonNegative = Annotated[float, Ge(0)]  # a loss weight, a decay, a warm-up length
PositiveFraction = Annotated[float, Interval(gt=0, le=1)]  # a share that keeps some
OpenFraction = Annotated[float, Interval(gt=0, lt=1)]  # a ratio that must keep and drop some
Momentum = Annotated[float, Interval(ge=0, le=1)]
Probability = Annotated[float, Interval(ge=0, le=1)]
DropRate = Annotated[float, Interval(ge=0, lt=1)]  # a rate that keeps some

# Schedules as the models read them: (warm-up start, peak, end) and (start, end).
DecaySchedule = tuple[NonNegative, NonNegative]
EmaSchedule = tuple[Momentum, Momentum]
Bounds = tuple[Positive, Positive]  # (low, high): a scale or aspect range to draw from
ScheduleScale = Annotated[float, Ge(1)]  # 1: schedules end with the run; more: after it
