/* The one place the version is written. */
#ifndef SLUICE_VERSION_H
#define SLUICE_VERSION_H

#define SLUICE_VERSION "0.1.0"

#endif
