/* Shared helpers of the comparison's C programs: sample output and argument parsing.
 *
 * Every program prints one line per measured repetition,
 *     SAMPLE <bench> <impl> <param> <value> <unit>
 * which run.sh pools over the interleaved launches into medians, min and max. */
#ifndef COMPARE_COMMON_H
#define COMPARE_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static inline double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static inline void sample(const char *bench, const char *impl, const char *param, double value,
			  const char *unit)
{
	printf("SAMPLE %s %s %s %.6g %s\n", bench, impl, param, value, unit);
	fflush(stdout);
}

/* The value of "-name value" in argv, or dflt. */
static inline long arg_long(int argc, char **argv, const char *name, long dflt)
{
	for (int i = 1; i + 1 < argc; i++)
		if (strcmp(argv[i], name) == 0)
			return strtol(argv[i + 1], NULL, 10);
	return dflt;
}

static inline const char *arg_str(int argc, char **argv, const char *name, const char *dflt)
{
	for (int i = 1; i + 1 < argc; i++)
		if (strcmp(argv[i], name) == 0)
			return argv[i + 1];
	return dflt;
}

static inline int arg_flag(int argc, char **argv, const char *name)
{
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], name) == 0)
			return 1;
	return 0;
}

/* Parses the comma-separated numbers of "-name a,b,c" into out (at most max); their count. */
static inline int arg_list(int argc, char **argv, const char *name, long *out, int max)
{
	const char *s = arg_str(argc, argv, name, NULL);
	int n = 0;
	while (s && *s && n < max) {
		char *end;
		out[n++] = strtol(s, &end, 10);
		s = *end == ',' ? end + 1 : end;
		if (*end != ',' && *end != '\0')
			break;
	}
	return n;
}

/* "8B", "1KiB", "64KiB", "1MiB", "16MiB" */
static inline void size_name(size_t size, char *out, size_t n)
{
	if (size >= (1u << 20) && size % (1u << 20) == 0)
		snprintf(out, n, "%zuMiB", size >> 20);
	else if (size >= 1024 && size % 1024 == 0)
		snprintf(out, n, "%zuKiB", size >> 10);
	else
		snprintf(out, n, "%zuB", size);
}

#endif
