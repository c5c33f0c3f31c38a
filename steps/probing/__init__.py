"""The probe: the machine read into Facts (NVML, /proc, /sys, the fabric)."""
