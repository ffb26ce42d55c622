"""One module per `./distlab` command that is not itself a grading module (cli.py dispatches)."""
