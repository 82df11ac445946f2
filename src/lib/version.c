/*
 * version.c — skl_version, the one function the umbrella header declares
 * itself.  It sits above the parts (src/lib/<part>/), as skiplock.h does.
 */
#include "skiplock.h"

const char *skl_version(void)
{
	return SKL_VERSION_STRING;
}
