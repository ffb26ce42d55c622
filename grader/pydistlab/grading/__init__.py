"""The steps of a grade (grade.py puts them together): passes, plan, strategy, builds, items."""
