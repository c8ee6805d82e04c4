"""Safe checkpoint loading: format sniffing, static pickle inspection, model materialisation."""
