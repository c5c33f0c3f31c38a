"""Choices made from Facts and Answers before any step is planned: the driver branch, CUDA, archs,
memory, the C++ standard, and the warnings that follow from the machine."""
