"""mlsetup's data files (tables with their sources, recipes, the stylesheet, the systemd unit, the
Ansible role, recorded machines). A package only so that they ship in the wheel and are found
through importlib.resources wherever mlsetup is installed."""
