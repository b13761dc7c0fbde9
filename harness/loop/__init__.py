"""The optimization loop: propose, extract, evaluate, feed back. It reports
through an observer (loop/observer.py) and never prints itself."""
