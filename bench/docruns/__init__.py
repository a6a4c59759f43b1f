"""The parts of bench/examples.py (the terminal sessions shown in docs/, run and recorded).

steps (a session's steps and what a page shows of each output), shell (running a session: the
shell state carried from one command to the next, terminals, background servers, the test
sshd), files (the input files the sessions start from), pages (rewriting a page's console
blocks), and the sessions themselves: tutorial (tutorial.md, data.md), models (optimize,
inspect, report), devices (deploy, releases, rollback, bench, devices probe), split
(partition, serve-cloud, run-split), profiles (profiles.md and the profiles pages).

Not run: the ```sh blocks of the pages, lists of commands to type without their output (e.g.
deploy.md's "Over SSH" to pi@raspberrypi.local, partition.md's "On a real device"): they need a
real board, and tests/test_doc_figures.py fails on a ```sh block that shows a ``$ `` session.
"""
