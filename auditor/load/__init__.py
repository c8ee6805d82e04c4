"""Safe checkpoint loading: format sniffing, static pickle inspection, model materialisation.

Importing it puts the Hugging Face libraries offline for the whole process (see :mod:`.offline`).
"""

from auditor.load.offline import force_offline

force_offline()
