"""`./distlab audit`: constructs no honest solution needs, and submissions that share their code.

lexer.py tokenizes C++ as the compiler does (comments, raw strings, line splices, digraphs);
rules.py lists the suspicious constructs of one owned file; similarity.py compares submissions by
winnowed fingerprints; core.py applies both to loaded submissions; commands/audit.py is the command.
"""
