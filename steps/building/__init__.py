"""A build's machinery: the memory governor and its throttle, the jobserver, the build's process
tree, what a dead build leaves, the wheels, the source trees and build tools."""
